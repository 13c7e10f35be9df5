// Package metrics holds jobkeeper's Prometheus registry and the client-go
// workqueue metrics provider, shared by every controller. Controllers register
// their own collectors on Registry (or on a Registerer handed to them).
package metrics
