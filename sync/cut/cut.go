// Package cut bounds text taken from outside (a request, a Kubernetes
// object, an HAProxy reply, the environment) before an error, a report or a
// log line quotes it: whoever controls the text must not control the size of
// what we write.
package cut

import "unicode/utf8"

// Marker ends a string that was cut.
const Marker = "...(cut)"

// To returns s whole if it has at most n bytes; otherwise its first n bytes,
// fewer if n falls inside a UTF-8 sequence, followed by Marker.
func To(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + Marker
}
