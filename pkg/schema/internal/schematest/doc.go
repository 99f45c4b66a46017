// Package schematest holds the test machinery OpenAI's surfaces (chat, responses) share:
// the request benchmark and fuzz drivers, which take what differs per surface (its bodies,
// its RewriteRequest, its sub-benchmark prefix) as parameters. Only tests import it.
package schematest
