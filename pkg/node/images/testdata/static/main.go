// Command static is a program built without cgo: an executable that
// needs no shared library.
package main

func main() {}
