package sandbox

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func TestShortWatchesSetsTimeoutSecondsOnWatchesOnly(t *testing.T) {
	tests := []struct {
		name  string
		query string
		want  string // timeoutSeconds the server sees
	}{
		{name: "watch without timeout", query: "watch=true", want: "2"},
		{name: "watch=1", query: "watch=1&resourceVersion=7", want: "2"},
		{name: "watch asking for longer", query: "watch=true&timeoutSeconds=300", want: "2"},
		{name: "watch asking for less", query: "watch=true&timeoutSeconds=1", want: "1"},
		{name: "list", query: "limit=500", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.URL.Query().Get("timeoutSeconds")
			}))
			defer srv.Close()
			cfg := ShortWatches(&rest.Config{Host: srv.URL}, 1500*time.Millisecond)
			client, err := rest.HTTPClientFor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Get(srv.URL + "/api/v1/configmaps?" + tt.query)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got != tt.want {
				t.Errorf("ShortWatches(1.5s): %s reached the server with timeoutSeconds=%q, want %q", tt.query, got, tt.want)
			}
		})
	}
}
