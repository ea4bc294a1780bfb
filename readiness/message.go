package readiness

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits that the Kubernetes API puts on metav1.Condition.
const (
	// MaxReasonBytes is the longest reason a condition may carry.
	MaxReasonBytes = 1024
	// MaxMessageBytes is the longest message a condition may carry.
	MaxMessageBytes = 32768
)

// ValidReason reports whether s is a valid condition reason: 1 to
// [MaxReasonBytes] bytes matching the CRD reason pattern
// ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$ (CamelCase in practice).
func ValidReason(s string) bool {
	if s == "" || len(s) > MaxReasonBytes {
		return false
	}
	if !isLetter(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isReasonByte(s[i]) {
			return false
		}
	}
	return isReasonEnd(s[len(s)-1])
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isReasonEnd(c byte) bool { return isLetter(c) || '0' <= c && c <= '9' || c == '_' }

func isReasonByte(c byte) bool { return isReasonEnd(c) || c == ',' || c == ':' }

// repairReason returns s when it is a valid reason. Otherwise it drops the
// bytes the pattern does not allow and the non-letters at the start, trims
// the end and the length; if nothing is left it returns fallback.
func repairReason(s, fallback string) string {
	if ValidReason(s) {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if len(b) == 0 && !isLetter(c) || !isReasonByte(c) {
			continue
		}
		b = append(b, c)
	}
	if len(b) > MaxReasonBytes {
		b = b[:MaxReasonBytes]
	}
	for len(b) > 0 && !isReasonEnd(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return fallback
	}
	return string(b)
}

// truncate cuts s to at most n bytes on a rune boundary, ending it with
// "…" when it cut anything.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	if n < len(ellipsis) {
		return ""
	}
	n -= len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis
}

// more is the suffix naming the parts left out of a message.
func more(n int) string {
	if n <= 0 {
		return ""
	}
	return " … and " + strconv.Itoa(n) + " more"
}

// joinBounded joins parts with "; ", listing at most maxListed of them and
// ending with "… and N more" for the rest, in at most maxBytes bytes. The
// first part is always listed, truncated if it must be.
func joinBounded(parts []string, maxListed, maxBytes int) string {
	if len(parts) == 0 {
		return ""
	}
	// Reserve room for the longest suffix the message could need.
	reserve := len(more(len(parts)))
	var b strings.Builder
	for i, p := range parts {
		rest := len(parts) - i
		if i == 0 {
			room := maxBytes
			if len(parts) > 1 {
				room -= reserve
			}
			b.WriteString(truncate(p, room))
			continue
		}
		need := len("; ") + len(p)
		if rest > 1 {
			need += reserve
		}
		if i >= maxListed || b.Len()+need > maxBytes {
			b.WriteString(more(rest))
			return b.String()
		}
		b.WriteString("; ")
		b.WriteString(p)
	}
	return b.String()
}

// oneLine replaces line breaks and tabs with spaces and trims the ends, so
// that a message reads on one line in kubectl's output.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		switch r {
		case '\n', '\r', '\t':
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}
