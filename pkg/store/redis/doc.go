// Package redis keeps the server's cross-request state in a Redis shared by its replicas: the
// container Registry with its tombstones, the continuations (pending calls, aliases, context
// containers) and the directory of live sandbox nodes, behind the interfaces of package store
// and with the contracts, bounds and lifetimes of package memory.
//
// Layout. Every key starts with Options.Prefix ("codeinterp:"). Each store keeps its keys under
// one hash tag ({registry}, {pending}, {alias}, {containers}, {nodes}), so that the Lua scripts
// which keep its indexes consistent run on one Redis Cluster slot; a store is thus as large as
// one shard holds, which its bounds keep small. An identity or id is part of a key as it is up
// to memory.MaxKeyBytes, else as a fixed-size hash of it; every part but the last is length
// prefixed, so that two different tuples never share a key.
//
// Time. Every entry has a native TTL (PX) that frees it whatever happens to the replicas, and a
// deadline read from Options.Now that the calls check, so that replicas agree on what has
// expired as closely as their clocks do (NTP is enough for TTLs of minutes and more).
//
// Faults. Registry and Nodes methods return Redis's errors, wrapped; the continuation methods,
// which have no error result, log them (at most one line a second) and behave as if nothing
// were stored. Every call is bounded by Options.Timeout, so that a dead Redis never holds a
// request. No request path lists keys (no KEYS, no SCAN).
package redis
