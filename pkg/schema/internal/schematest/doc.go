// Package schematest holds the test machinery OpenAI's surfaces (chat, responses) share: the
// request benchmark and fuzz drivers, the table runners of the RewriteRequest, ParseTurn,
// Final and FollowUp tests, and the golden-file and SSE helpers. Each takes what differs per
// surface (its bodies, its RewriteRequest or Final, its names) as parameters. Only tests
// import it.
package schematest
