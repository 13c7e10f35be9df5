// Package builder has object builders for Jobs, Pods and other objects used by
// unit, integration and benchmark tests, in the style of
//
//	builder.MakeJob("j", ns).Parallelism(2).Completions(4).Indexed().Obj()
//
// Every builder starts from documented defaults and returns a fresh object
// from Obj, so one builder can stamp out several objects.
package builder
