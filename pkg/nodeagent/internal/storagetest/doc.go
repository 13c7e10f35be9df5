// Package storagetest builds the storage objects (classes, claims, local
// volumes) that the tests of the binder and of the agent share.
//
// It is for tests only: no package of the node agent may import it outside
// its _test.go files, and it imports none of them.
package storagetest
