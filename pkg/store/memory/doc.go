// Package memory keeps the server's cross-request state in the memory of one process: for a
// single replica, or for tests. A store shared by replicas will be a package beside it.
package memory
