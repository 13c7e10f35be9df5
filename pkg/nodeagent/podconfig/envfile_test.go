package podconfig

import (
	"fmt"
	"strings"
	"testing"
)

func TestLookupEnvFile(t *testing.T) {
	cases := []struct {
		name, file, key string
		want, wantErr   string
	}{
		{name: "simple", file: "A='1'\nB='2'\n", key: "B", want: "2"},
		{name: "absent key", file: "A='1'\n", key: "B", want: ""},
		{name: "blank lines, comments, leading blanks, CRLF", file: "\n# c\n   \t# indented comment\r\n  \tA='x y'  # trailing\r\n", key: "A", want: "x y"},
		{name: "literal value: no escapes, no expansion", file: `A='$HOME \n "q"'`, key: "A", want: `$HOME \n "q"`},
		{name: "multi-line value keeps newlines", file: "A='line1\nline2\n'\nB='b'\n", key: "A", want: "line1\nline2\n"},
		{name: "line numbers count continuation lines", file: "A='1\n2'\nB\n", key: "C", wantErr: "invalid environment variable format at line 3: missing '='"},
		{name: "blank after = is the empty value, rest unread", file: "A= 'x' junk\n", key: "A", want: ""},
		{name: "first definition wins, later lines unread", file: "A='1'\nA='2'\nbroken\n", key: "A", want: "1"},
		{name: "earlier lines must be well formed", file: "broken\nA='1'\n", key: "A", wantErr: "invalid environment variable format at line 1: missing '='"},
		{name: "empty name", file: "='v'\n", key: "A", wantErr: "invalid environment variable format at line 1: empty variable name"},
		{name: "blank before =", file: "A ='v'\n", key: "A", wantErr: "invalid environment variable format at line 1: whitespace before '=' is not allowed"},
		{name: "unquoted", file: "A=v\n", key: "A", wantErr: "invalid environment variable format at line 1: value must be enclosed in single quotes"},
		{name: "double quotes", file: `A="v"`, key: "A", wantErr: "invalid environment variable format at line 1: value must be enclosed in single quotes"},
		{name: "nothing after =", file: "A=\n", key: "A", wantErr: "invalid environment variable format at line 1: value must be enclosed in single quotes"},
		{name: "content after closing quote", file: "A='a''b'\n", key: "A", wantErr: "invalid environment variable format at line 1: unexpected content after closing quote"},
		{name: "content after a multi-line value's quote", file: "A='a\nb'x\n", key: "A", wantErr: "invalid environment variable format at line 2: unexpected content after closing quote"},
		{name: "unclosed quote", file: "X='1'\nA='a\nb\n", key: "A", wantErr: "invalid environment variable format starting at line 2: unclosed single quote"},
		{name: "export is part of the name", file: "export A='1'\n", key: "export A", want: "1"},
		{name: "relaxed names", file: "my.key-1='v'\n", key: "my.key-1", want: "v"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LookupEnvFile(strings.NewReader(tc.file), tc.key)
			if gotErr := fmt.Sprint(err); (err != nil || tc.wantErr != "") && gotErr != tc.wantErr {
				t.Fatalf("error = %v, want %q", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("value = %q, want %q", got, tc.want)
			}
		})
	}
}
