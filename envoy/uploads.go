package envoy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// RouteAnthropicUploads sends Anthropic's file uploads to codeinterp, for a server whose
// config has anthropic_files.own_uploads: beside each route of the ingress for the container
// files of Anthropic's Files API (prefix ".../v1/files/cfile_"), it adds, as copies of that
// route (same cluster, timeouts and ext_proc per-route config), a route for ".../v1/files"
// itself (POST an upload, GET the list) and one for the uploads' ids (".../v1/files/file_").
// Without it those go to the model's own Files API, as natively. It is an error if the
// ingress has no cfile_ route.
func RouteAnthropicUploads(b *bootstrapv3.Bootstrap) error {
	in, err := FindIngress(b)
	if err != nil {
		return err
	}
	n := 0
	for _, vh := range in.HCM.GetRouteConfig().GetVirtualHosts() {
		var out []*routev3.Route
		for _, r := range vh.GetRoutes() {
			out = append(out, r)
			base, ok := strings.CutSuffix(r.GetMatch().GetPrefix(), "/v1/files/cfile_")
			if !ok {
				continue
			}
			if slices.ContainsFunc(vh.GetRoutes(), func(o *routev3.Route) bool { return o.GetMatch().GetPath() == base+"/v1/files" }) {
				return fmt.Errorf("route anthropic uploads: %s/v1/files is routed already", base)
			}
			list := proto.Clone(r).(*routev3.Route)
			list.Match.PathSpecifier = &routev3.RouteMatch_Path{Path: base + "/v1/files"}
			ids := proto.Clone(r).(*routev3.Route)
			ids.Match.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: base + "/v1/files/file_"}
			out = append(out, list, ids)
			n++
		}
		vh.Routes = out
	}
	if n == 0 {
		return errors.New("route anthropic uploads: no route for /v1/files/cfile_ to copy")
	}
	a, err := anypb.New(in.HCM)
	if err != nil {
		return fmt.Errorf("route anthropic uploads: pack connection manager: %w", err)
	}
	in.HCMAny.TypeUrl, in.HCMAny.Value = a.GetTypeUrl(), a.GetValue()
	return nil
}
