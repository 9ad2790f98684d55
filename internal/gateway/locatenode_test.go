package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/api/route"
	"github.com/sandpit-dev/sandpit/internal/gateway"
)

// A LocateNode route names its node from the request, with the path's
// wildcards as the surface's own mux sees them.
func TestLocateNodeNamesTheNode(t *testing.T) {
	tbl := gateway.NewTable(gateway.Surface{Routes: []route.Route{{
		Pattern: "GET /v1/templates/{name}/builds/{build}",
		Forwarding: route.Forwarding{Locate: route.LocateNode, Node: func(r *http.Request) string {
			return map[string]string{"b1": "n2"}[r.PathValue("build")]
		}},
	}}})
	for _, tc := range []struct{ path, node string }{
		{"/v1/templates/py/builds/b1", "n2"},
		{"/v1/templates/py/builds/b9", ""},
	} {
		rt, ok := tbl.Locate(httptest.NewRequest("GET", tc.path, nil))
		if !ok || rt.Locate != route.LocateNode || rt.Node != tc.node {
			t.Errorf("%s: %+v %v, want node %q", tc.path, rt, ok, tc.node)
		}
	}
}
