package due

import (
	"strings"
	"unicode/utf8"
)

// Clip shortens user input that status repeats to at most n bytes of valid
// UTF-8, so that the value reads back from the API server exactly as written
// (a request is answered once: when status repeats its value).
func Clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
