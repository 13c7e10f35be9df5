// Package runtimetest holds fakes of the runtime's interfaces that the
// tests of several node agent packages share.
//
// It is for tests only: no package may import it outside its _test.go
// files. It imports only the runtime package.
package runtimetest
