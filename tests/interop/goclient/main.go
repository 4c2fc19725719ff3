// A CNPG-I client configured the way the CloudNativePG operator configures
// its plugin connections (TLS 1.3, its client certificate, RootCAs = the
// plugin's server certificate, ServerName = the Service name), using the
// upstream generated stubs. It runs the probing sequence and every Operator
// and OperatorLifecycle RPC against the Rust hello-world plugin, applies the
// patches with a Go JSON Patch library, and checks the results.
//
// Each check prints "ok <side>: <rpc>: <what>" or "FAIL ...", then a closing
// "interop-go: N passed, M failed" line; the exit code is 1 on any failure.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/cloudnative-pg/cnpg-i/pkg/identity"
	"github.com/cloudnative-pg/cnpg-i/pkg/lifecycle"
	"github.com/cloudnative-pg/cnpg-i/pkg/operator"
	jsonpatch "github.com/evanphx/json-patch/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

const side = "Go client -> Rust hello-world"
const plugin = "cnpg-i-hello-world.cloudnative-pg.io"

var passed, failed int

func check(rpc, what string, ok bool, detail string) {
	if ok {
		passed++
		fmt.Printf("ok   %s: %s: %s\n", side, rpc, what)
	} else {
		failed++
		fmt.Printf("FAIL %s: %s: %s: %s\n", side, rpc, what, detail)
	}
}

func apply(doc, patch []byte) ([]byte, error) {
	if len(patch) == 0 {
		return doc, nil
	}
	decoded, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, fmt.Errorf("not a JSON patch: %w", err)
	}
	return decoded.Apply(doc)
}

func main() {
	address := flag.String("address", "", "host:port of the plugin")
	serverCert := flag.String("server-cert", "", "the plugin's server certificate (pinned as RootCAs)")
	clientCert := flag.String("client-cert", "", "certificate the operator presents")
	clientKey := flag.String("client-key", "", "its key")
	serverName := flag.String("server-name", "", "name to verify (the Service name)")
	label := flag.String("label", "", "name of this run, printed in every line")
	flag.Parse()

	cert, err := tls.LoadX509KeyPair(*clientCert, *clientKey)
	if err != nil {
		fmt.Println("FAIL loading client certificate:", err)
		os.Exit(1)
	}
	pem, err := os.ReadFile(*serverCert)
	if err != nil {
		fmt.Println("FAIL reading server certificate:", err)
		os.Exit(1)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	config := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      roots,
		ServerName:   *serverName,
	}
	conn, err := grpc.NewClient(*address, grpc.WithTransportCredentials(credentials.NewTLS(config)))
	if err != nil {
		fmt.Println("FAIL dialing:", err)
		os.Exit(1)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fmt.Printf("# %s\n", *label)

	ids := identity.NewIdentityClient(conn)
	meta, err := ids.GetPluginMetadata(ctx, &identity.GetPluginMetadataRequest{})
	check("Identity/GetPluginMetadata", "name", err == nil && meta.GetName() == plugin, fmt.Sprint(meta, err))
	if err != nil {
		fmt.Printf("go-client: %d passed, %d failed\n", passed, failed)
		os.Exit(1)
	}
	caps, err := ids.GetPluginCapabilities(ctx, &identity.GetPluginCapabilitiesRequest{})
	services := map[identity.PluginCapability_Service_Type]bool{}
	for _, c := range caps.GetCapabilities() {
		services[c.GetService().GetType()] = true
	}
	check("Identity/GetPluginCapabilities", "operator and lifecycle services", err == nil &&
		services[identity.PluginCapability_Service_TYPE_OPERATOR_SERVICE] &&
		services[identity.PluginCapability_Service_TYPE_LIFECYCLE_SERVICE], fmt.Sprint(caps, err))
	probe, err := ids.Probe(ctx, &identity.ProbeRequest{})
	check("Identity/Probe", "ready", err == nil && probe.GetReady(), fmt.Sprint(probe, err))

	ops := operator.NewOperatorClient(conn)
	opCaps, err := ops.GetCapabilities(ctx, &operator.OperatorCapabilitiesRequest{})
	rpcs := map[operator.OperatorCapability_RPC_Type]bool{}
	for _, c := range opCaps.GetCapabilities() {
		rpcs[c.GetRpc().GetType()] = true
	}
	check("Operator/GetCapabilities", "four RPCs", err == nil && len(rpcs) == 4 &&
		rpcs[operator.OperatorCapability_RPC_TYPE_MUTATE_CLUSTER] &&
		rpcs[operator.OperatorCapability_RPC_TYPE_SET_STATUS_IN_CLUSTER], fmt.Sprint(opCaps, err))

	plain := []byte(`{"apiVersion":"postgresql.cnpg.io/v1","kind":"Cluster","metadata":{"name":"cluster-example","namespace":"default"},"spec":{"instances":3,"plugins":[{"name":"` + plugin + `"}],"storage":{"size":"1Gi"}}}`)
	mistake := []byte(`{"apiVersion":"postgresql.cnpg.io/v1","kind":"Cluster","metadata":{"name":"cluster-example"},"spec":{"plugins":[{"name":"` + plugin + `","parameters":{"annotations":"{ this is a mistake"}}]}}`)

	created, err := ops.ValidateClusterCreate(ctx, &operator.OperatorValidateClusterCreateRequest{Definition: mistake})
	errs := created.GetValidationErrors()
	// cnpg-i-machinery's convention (validation.BuildErrorForParameter).
	check("Operator/ValidateClusterCreate", "the mistake is reported on [spec plugins 0 annotations] with the raw value", err == nil && len(errs) == 1 &&
		reflect.DeepEqual(errs[0].GetPathComponents(), []string{"spec", "plugins", "0", "annotations"}) &&
		errs[0].GetValue() == "{ this is a mistake", fmt.Sprint(created, err))
	created, err = ops.ValidateClusterCreate(ctx, &operator.OperatorValidateClusterCreateRequest{Definition: plain})
	check("Operator/ValidateClusterCreate", "a plain Cluster is valid", err == nil && len(created.GetValidationErrors()) == 0, fmt.Sprint(created, err))

	oldLabels := []byte(`{"spec":{"plugins":[{"name":"` + plugin + `","parameters":{"labels":"{\"a\":\"b\"}"}}]}}`)
	newLabels := []byte(`{"spec":{"plugins":[{"name":"` + plugin + `","parameters":{"labels":"{\"a\":\"c\"}"}}]}}`)
	changed, err := ops.ValidateClusterChange(ctx, &operator.OperatorValidateClusterChangeRequest{OldCluster: oldLabels, NewCluster: newLabels})
	check("Operator/ValidateClusterChange", "changing labels is refused", err == nil && len(changed.GetValidationErrors()) == 1 &&
		changed.GetValidationErrors()[0].GetMessage() == "Labels cannot be changed", fmt.Sprint(changed, err))

	mutated, err := ops.MutateCluster(ctx, &operator.OperatorMutateClusterRequest{Definition: plain})
	var patchedCluster []byte
	if err == nil {
		patchedCluster, err = apply(plain, mutated.GetJsonPatch())
	}
	var c struct {
		Spec struct {
			Plugins []struct {
				Parameters map[string]string `json:"parameters"`
			} `json:"plugins"`
			Storage map[string]string `json:"storage"`
		} `json:"spec"`
	}
	_ = json.Unmarshal(patchedCluster, &c)
	check("Operator/MutateCluster", "defaults written back, other fields kept", err == nil && len(c.Spec.Plugins) == 1 &&
		c.Spec.Plugins[0].Parameters["labels"] == `{"plugin-metadata":"default"}` && c.Spec.Storage["size"] == "1Gi", fmt.Sprint(string(patchedCluster), err))

	withStatus := []byte(`{"spec":{"plugins":[{"name":"` + plugin + `"}]},"status":{"pluginStatus":[{"name":"` + plugin + `","version":"0.1.0"}]}}`)
	st, err := ops.SetStatusInCluster(ctx, &operator.SetStatusInClusterRequest{Cluster: withStatus})
	check("Operator/SetStatusInCluster", `reports {"enabled":true}`, err == nil && string(st.GetJsonStatus()) == `{"enabled":true}`, fmt.Sprint(st, err))

	_, err = ops.Deregister(ctx, &operator.DeregisterRequest{Definition: plain})
	check("Operator/Deregister", "not advertised, UNIMPLEMENTED", status.Code(err) == codes.Unimplemented, fmt.Sprint(err))

	_, err = ops.ValidateClusterCreate(ctx, &operator.OperatorValidateClusterCreateRequest{Definition: []byte("\x00garbage")})
	check("Operator/ValidateClusterCreate", "garbage is INVALID_ARGUMENT", status.Code(err) == codes.InvalidArgument, fmt.Sprint(err))

	lc := lifecycle.NewOperatorLifecycleClient(conn)
	lcCaps, err := lc.GetCapabilities(ctx, &lifecycle.OperatorLifecycleCapabilitiesRequest{})
	ok := err == nil && len(lcCaps.GetLifecycleCapabilities()) == 1
	if ok {
		cap := lcCaps.GetLifecycleCapabilities()[0]
		ok = cap.GetGroup() == "" && cap.GetKind() == "Pod" && len(cap.GetOperationTypes()) == 2 &&
			cap.GetOperationTypes()[0].GetType() == lifecycle.OperatorOperationType_TYPE_CREATE &&
			cap.GetOperationTypes()[1].GetType() == lifecycle.OperatorOperationType_TYPE_EVALUATE
	}
	check("OperatorLifecycle/GetCapabilities", "core Pod CREATE and EVALUATE", ok, fmt.Sprint(lcCaps, err))

	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"cluster-example-1","labels":{"cnpg.io/cluster":"cluster-example"}},"spec":{"containers":[{"name":"postgres","image":"ghcr.io/cloudnative-pg/postgresql:17"}]}}`)
	for _, op := range []lifecycle.OperatorOperationType_Type{lifecycle.OperatorOperationType_TYPE_CREATE, lifecycle.OperatorOperationType_TYPE_EVALUATE} {
		hook, err := lc.LifecycleHook(ctx, &lifecycle.OperatorLifecycleRequest{
			OperationType:     &lifecycle.OperatorOperationType{Type: op},
			ClusterDefinition: plain,
			ObjectDefinition:  pod,
		})
		var patched []byte
		if err == nil {
			patched, err = apply(pod, hook.GetJsonPatch())
		}
		var p struct {
			Metadata struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				InitContainers []struct {
					Name          string `json:"name"`
					Image         string `json:"image"`
					RestartPolicy string `json:"restartPolicy"`
				} `json:"initContainers"`
			} `json:"spec"`
		}
		_ = json.Unmarshal(patched, &p)
		check("OperatorLifecycle/LifecycleHook "+op.String(), "the Go-applied patch gives the expected Pod", err == nil &&
			p.Metadata.Labels["plugin-metadata"] == "default" && p.Metadata.Labels["cnpg.io/cluster"] == "cluster-example" &&
			p.Metadata.Annotations["plugin-metadata"] == "default" && len(p.Spec.InitContainers) == 1 &&
			p.Spec.InitContainers[0].Name == "pauser" && p.Spec.InitContainers[0].Image == "registry.k8s.io/pause:3.10" &&
			p.Spec.InitContainers[0].RestartPolicy == "Always", fmt.Sprint(string(patched), err))
	}
	_, err = lc.LifecycleHook(ctx, &lifecycle.OperatorLifecycleRequest{
		OperationType:     &lifecycle.OperatorOperationType{Type: lifecycle.OperatorOperationType_TYPE_CREATE},
		ClusterDefinition: plain,
		ObjectDefinition:  []byte("not json"),
	})
	check("OperatorLifecycle/LifecycleHook", "garbage is INVALID_ARGUMENT", status.Code(err) == codes.InvalidArgument, fmt.Sprint(err))

	fmt.Printf("go-client: %d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}
