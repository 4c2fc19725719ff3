// A CNPG-I plugin written with the upstream Go libraries (cnpg-i stubs and
// cnpg-i-machinery's CreateMainCmd), to show that cnpgi-operator drives Go
// plugins exactly as it drives Rust ones.
//
// It reads one parameter, "color" (red or blue, default blue): it validates
// it, writes the default back into the Cluster, and labels every instance Pod
// with "go-plugin: <color>".
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/cloudnative-pg/cnpg-i-machinery/pkg/pluginhelper/http"
	"github.com/cloudnative-pg/cnpg-i/pkg/identity"
	"github.com/cloudnative-pg/cnpg-i/pkg/lifecycle"
	"github.com/cloudnative-pg/cnpg-i/pkg/operator"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const pluginName = "cnpgi-go-plugin.example.com"

type identityServer struct {
	identity.UnimplementedIdentityServer
}

func (identityServer) GetPluginMetadata(context.Context, *identity.GetPluginMetadataRequest) (*identity.GetPluginMetadataResponse, error) {
	return &identity.GetPluginMetadataResponse{
		Name:        pluginName,
		Version:     "1.0.0",
		DisplayName: "Go interop plugin",
		Description: "Labels Pods with a color, written with cnpg-i-machinery",
	}, nil
}

func (identityServer) GetPluginCapabilities(context.Context, *identity.GetPluginCapabilitiesRequest) (*identity.GetPluginCapabilitiesResponse, error) {
	service := func(t identity.PluginCapability_Service_Type) *identity.PluginCapability {
		return &identity.PluginCapability{Type: &identity.PluginCapability_Service_{Service: &identity.PluginCapability_Service{Type: t}}}
	}
	return &identity.GetPluginCapabilitiesResponse{Capabilities: []*identity.PluginCapability{
		service(identity.PluginCapability_Service_TYPE_OPERATOR_SERVICE),
		service(identity.PluginCapability_Service_TYPE_LIFECYCLE_SERVICE),
	}}, nil
}

func (identityServer) Probe(context.Context, *identity.ProbeRequest) (*identity.ProbeResponse, error) {
	return &identity.ProbeResponse{Ready: true}, nil
}

// cluster is the part of a Cluster this plugin reads.
type cluster struct {
	Spec struct {
		Plugins []struct {
			Name       string            `json:"name"`
			Parameters map[string]string `json:"parameters"`
		} `json:"plugins"`
	} `json:"spec"`
}

// color returns the plugin's index in spec.plugins, the color, and whether it was set.
func color(definition []byte) (int, string, bool, error) {
	var c cluster
	if err := json.Unmarshal(definition, &c); err != nil {
		return 0, "", false, status.Errorf(codes.InvalidArgument, "cannot decode Cluster: %v", err)
	}
	for i, p := range c.Spec.Plugins {
		if p.Name == pluginName {
			value, ok := p.Parameters["color"]
			if !ok || value == "" {
				return i, "blue", false, nil
			}
			return i, value, true, nil
		}
	}
	return -1, "blue", false, nil
}

type operatorServer struct {
	operator.UnimplementedOperatorServer
}

func (operatorServer) GetCapabilities(context.Context, *operator.OperatorCapabilitiesRequest) (*operator.OperatorCapabilitiesResult, error) {
	rpc := func(t operator.OperatorCapability_RPC_Type) *operator.OperatorCapability {
		return &operator.OperatorCapability{Type: &operator.OperatorCapability_Rpc{Rpc: &operator.OperatorCapability_RPC{Type: t}}}
	}
	return &operator.OperatorCapabilitiesResult{Capabilities: []*operator.OperatorCapability{
		rpc(operator.OperatorCapability_RPC_TYPE_VALIDATE_CLUSTER_CREATE),
		rpc(operator.OperatorCapability_RPC_TYPE_MUTATE_CLUSTER),
	}}, nil
}

func (operatorServer) ValidateClusterCreate(_ context.Context, r *operator.OperatorValidateClusterCreateRequest) (*operator.OperatorValidateClusterCreateResult, error) {
	index, value, _, err := color(r.GetDefinition())
	if err != nil {
		return nil, err
	}
	result := &operator.OperatorValidateClusterCreateResult{}
	if value != "red" && value != "blue" {
		result.ValidationErrors = append(result.ValidationErrors, &operator.ValidationError{
			PathComponents: []string{strconv.Itoa(index), "color"},
			Value:          value,
			Message:        "must be red or blue",
		})
	}
	return result, nil
}

func (operatorServer) MutateCluster(_ context.Context, r *operator.OperatorMutateClusterRequest) (*operator.OperatorMutateClusterResult, error) {
	index, value, set, err := color(r.GetDefinition())
	if err != nil {
		return nil, err
	}
	if set || index < 0 {
		return &operator.OperatorMutateClusterResult{}, nil
	}
	var c map[string]any
	_ = json.Unmarshal(r.GetDefinition(), &c)
	spec, _ := c["spec"].(map[string]any)
	plugins, _ := spec["plugins"].([]any)
	entry, _ := plugins[index].(map[string]any)
	var patch []map[string]any
	if _, ok := entry["parameters"]; !ok {
		patch = append(patch, map[string]any{"op": "add", "path": fmt.Sprintf("/spec/plugins/%d/parameters", index), "value": map[string]string{"color": value}})
	} else {
		patch = append(patch, map[string]any{"op": "add", "path": fmt.Sprintf("/spec/plugins/%d/parameters/color", index), "value": value})
	}
	bytes, _ := json.Marshal(patch)
	return &operator.OperatorMutateClusterResult{JsonPatch: bytes}, nil
}

type lifecycleServer struct {
	lifecycle.UnimplementedOperatorLifecycleServer
}

func (lifecycleServer) GetCapabilities(context.Context, *lifecycle.OperatorLifecycleCapabilitiesRequest) (*lifecycle.OperatorLifecycleCapabilitiesResponse, error) {
	return &lifecycle.OperatorLifecycleCapabilitiesResponse{LifecycleCapabilities: []*lifecycle.OperatorLifecycleCapabilities{{
		Group: "",
		Kind:  "Pod",
		OperationTypes: []*lifecycle.OperatorOperationType{
			{Type: lifecycle.OperatorOperationType_TYPE_CREATE},
			{Type: lifecycle.OperatorOperationType_TYPE_EVALUATE},
		},
	}}}, nil
}

func (lifecycleServer) LifecycleHook(_ context.Context, r *lifecycle.OperatorLifecycleRequest) (*lifecycle.OperatorLifecycleResponse, error) {
	_, value, _, err := color(r.GetClusterDefinition())
	if err != nil {
		return nil, err
	}
	var pod map[string]any
	if err := json.Unmarshal(r.GetObjectDefinition(), &pod); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "cannot decode object: %v", err)
	}
	if pod["kind"] != "Pod" {
		return &lifecycle.OperatorLifecycleResponse{}, nil
	}
	metadata, _ := pod["metadata"].(map[string]any)
	labels, hasLabels := metadata["labels"].(map[string]any)
	if hasLabels && labels["go-plugin"] == value {
		return &lifecycle.OperatorLifecycleResponse{}, nil
	}
	var patch []map[string]any
	if !hasLabels {
		patch = append(patch, map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{"go-plugin": value}})
	} else {
		patch = append(patch, map[string]any{"op": "add", "path": "/metadata/labels/go-plugin", "value": value})
	}
	bytes, _ := json.Marshal(patch)
	return &lifecycle.OperatorLifecycleResponse{JsonPatch: bytes}, nil
}

func main() {
	cmd := http.CreateMainCmd(identityServer{}, func(server *grpc.Server) error {
		operator.RegisterOperatorServer(server, operatorServer{})
		lifecycle.RegisterOperatorLifecycleServer(server, lifecycleServer{})
		return nil
	})
	cmd.Use = "plugin"
	root := &cobra.Command{Use: "cnpgi-go-plugin"}
	root.AddCommand(cmd)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
