package termtext

import "testing"

func TestCleanStripsTerminalControl(t *testing.T) {
	for in, want := range map[string]string{
		"plain name":                      "plain name",
		"red\x1b[31mtext\x1b[0m":          "redtext",
		"\x1b]0;pwned\x07title":           "title",
		"\x1b]8;;http://x\x1b\\link":      "link",
		"c1\u009b2Jclear":                 "c1clear",
		"tab\tnew\nline\rcr":              "tab new line cr",
		"bell\x07 del\x7f":                "bell  del ",
		"unterminated \x1b[":              "unterminated ",
		"utf-8 stays: naïve 日本":           "utf-8 stays: naïve 日本",
		"\x1bPdcs payload\x1b\\after":     "after",
		"esc-c \x1bcreset":                "esc-c reset",
		"osc c1 \u009d0;x\u009cafter":     "osc c1 after",
		"nul\x00byte":                     "nul byte",
		"\x1b[?1049h\x1b[2J\x1b[Hcleared": "cleared",
		// Invisible format characters are shown, not obeyed.
		"evil\u202Etxt.exe":       "evil<U+202E>txt.exe",
		"zero\u200Bwidth\uFEFF":   "zero<U+200B>width<U+FEFF>",
		"isolate \u2066x\u2069":   "isolate <U+2066>x<U+2069>",
		"line\u2028sep":           "line<U+2028>sep",
		"soft\u00ADhyphen \u061C": "soft<U+00AD>hyphen <U+061C>",
	} {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
	if got := CleanLine("a\tb\x1b[2K\r\n"); got != "a\tb\n" {
		t.Errorf("CleanLine = %q", got)
	}
	if got := CleanLine("loss 1.0 \u202Eflipped\n"); got != "loss 1.0 <U+202E>flipped\n" {
		t.Errorf("CleanLine = %q", got)
	}
}
