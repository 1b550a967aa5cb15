// Package secrets holds hostile store passwords for tests and a check that a
// text (status, events, logs) holds no part of one.
package secrets

import (
	"fmt"
	"strings"
)

// Password is a password and what makes it hostile.
type Password struct {
	Name  string
	Value string
}

// Hostile are passwords that break naive URL parsers: the characters URLs use as
// delimiters, escapes, none at all, and a very long one. Each mixes cases and
// digits so that none of its 3-character fragments occurs in ordinary messages,
// and has at least three characters before its first delimiter, so that a
// parser that splits there shows a fragment.
var Hostile = []Password{
	{"a slash", "Zqw/XjPw9Qk"},
	{"a question mark", "Qmr?Rk=Zt7X"},
	{"a hash", "Hxv#Fr4gMnt"},
	{"at signs", "Atk@Vw@Yj2Z"},
	{"colons", "Cqz:Xo:Nq5W"},
	{"percent signs", "Pcj%Ze%41Xq"},
	{"every delimiter", "Mxb/?#@:%Kv9"},
	{"nothing", ""},
	{"4 KiB", strings.Repeat("Lgq/Qz@", 600) + "Tl9"},
}

// Encode percent-encodes a user name or password for the userinfo of a URL:
// every byte but letters, digits and "-._~".
func Encode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// Leaks returns the 3-character fragments of password that occur in text.
func Leaks(text, password string) []string {
	seen := map[string]bool{}
	var out []string
	for i := 0; i+3 <= len(password); i++ {
		f := password[i : i+3]
		if !seen[f] && strings.Contains(text, f) {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}
