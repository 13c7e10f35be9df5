package podconfig

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// ErrEnvFileUnparsable is what a container is told when the file an env
// valueFrom.fileKeyRef names cannot be opened or read, or is malformed: the
// kubelet's message, which leaves the detail (it may quote the file's
// contents) to its log.
const ErrEnvFileUnparsable = "couldn't parse env file"

// LookupEnvFile reads an environment file (EnvFiles, beta and on since
// Kubernetes 1.35) and returns the value of key, "" when the file does not
// define it, in the format the kubelet accepts:
//
//   - one NAME='value' per line; blank lines and lines whose first
//     non-blank character is # are skipped, leading blanks ignored;
//   - the value is single-quoted and taken literally (no escapes, no
//     expansion); it may run over several lines, the newlines kept;
//   - after the closing quote only blanks or a # comment may follow;
//   - NAME= followed by a blank is the empty value (as a shell reads it),
//     whatever follows on the line;
//   - blanks before = are an error, as are a missing =, an empty name, an
//     unquoted or missing value and a quote never closed.
//
// The first definition of key wins: the file is not read beyond it, and
// lines before it must be well formed. Errors name the line.
func LookupEnvFile(r io.Reader, key string) (string, error) {
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimLeft(strings.TrimSuffix(sc.Text(), "\r"), " \t")
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, rest, ok := strings.Cut(text, "=")
		switch {
		case !ok:
			return "", fmt.Errorf("invalid environment variable format at line %d: missing '='", line)
		case name == "":
			return "", fmt.Errorf("invalid environment variable format at line %d: empty variable name", line)
		case strings.TrimRight(name, " \t") != name:
			return "", fmt.Errorf("invalid environment variable format at line %d: whitespace before '=' is not allowed", line)
		}
		var value string
		switch {
		case rest != "" && (rest[0] == ' ' || rest[0] == '\t'):
			// NAME= then a blank: the empty value, the rest of the line
			// unread.
		case !strings.HasPrefix(rest, "'"):
			return "", fmt.Errorf("invalid environment variable format at line %d: value must be enclosed in single quotes", line)
		default:
			v, err := quotedValue(sc, rest[1:], &line)
			if err != nil {
				return "", err
			}
			value = v
		}
		if name == key {
			return value, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", nil
}

// quotedValue reads a single-quoted value whose text after the opening
// quote is first, reading further lines from sc until the closing quote;
// *line is advanced past the lines read.
func quotedValue(sc *bufio.Scanner, first string, line *int) (string, error) {
	start := *line
	var b strings.Builder
	text := first
	for {
		if i := strings.IndexByte(text, '\''); i >= 0 {
			b.WriteString(text[:i])
			after := strings.TrimLeft(text[i+1:], " \t")
			if after != "" && !strings.HasPrefix(after, "#") {
				return "", fmt.Errorf("invalid environment variable format at line %d: unexpected content after closing quote", *line)
			}
			return b.String(), nil
		}
		b.WriteString(text)
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return "", err
			}
			return "", fmt.Errorf("invalid environment variable format starting at line %d: unclosed single quote", start)
		}
		*line++
		b.WriteByte('\n')
		text = strings.TrimSuffix(sc.Text(), "\r")
	}
}
