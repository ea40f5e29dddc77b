package chattemplate

import (
	"encoding/json"
	"testing"
)

func TestBigIntegersRenderAsPython(t *testing.T) {
	t.Parallel()
	tmpl, err := Parse(`{{ v }}|{{ v | tojson }}|{{ [v] }}|{{ v is integer }}|{{ v is number }}|{{ v is callable }}|{{ v == v }}|{{ v is string }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		{"18446744073709551616", "18446744073709551616|18446744073709551616|[18446744073709551616]|True|True|False|True|False"},
		{"-99999999999999999999999", "-99999999999999999999999|-99999999999999999999999|[-99999999999999999999999]|True|True|False|True|False"},
		{"9223372036854775807", "9223372036854775807|9223372036854775807|[9223372036854775807]|True|True|False|True|False"},
	} {
		got, err := tmpl.Render(Input{Messages: user("x"), Kwargs: map[string]any{"v": json.RawMessage(tc.in)}})
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	// Arithmetic on a big integer is refused, never answered differently.
	tmpl, _ = Parse(`{{ v + 1 }}`, "", "")
	if got, err := tmpl.Render(Input{Messages: user("x"), Kwargs: map[string]any{"v": json.RawMessage("18446744073709551616")}}); err == nil {
		t.Errorf("v + 1 rendered %q, want an error", got)
	}
}
