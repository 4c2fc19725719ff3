// The hello-world plugin's behaviour, written in Go on cnpg-i-machinery's
// helpers the way upstream Go plugins are written, under the same plugin
// name as the Rust hello-world (examples/hello-world). tests/interop/run.sh
// renders every sample of examples/hello-world/clusters with both and
// compares: exit codes, the fields validation errors are reported on, the
// Pods' labels and annotations, and the status.
//
// Parameters "labels" and "annotations" are JSON objects of strings; missing
// or empty they default to {"plugin-metadata": "default"}. Labels cannot be
// changed once the Cluster exists. Each instance Pod gets the labels, the
// annotations and a "pauser" native sidecar.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	apiv1 "github.com/cloudnative-pg/api/pkg/api/v1"
	"github.com/cloudnative-pg/cnpg-i-machinery/pkg/pluginhelper/clusterstatus"
	"github.com/cloudnative-pg/cnpg-i-machinery/pkg/pluginhelper/common"
	"github.com/cloudnative-pg/cnpg-i-machinery/pkg/pluginhelper/decoder"
	"github.com/cloudnative-pg/cnpg-i-machinery/pkg/pluginhelper/http"
	"github.com/cloudnative-pg/cnpg-i-machinery/pkg/pluginhelper/object"
	"github.com/cloudnative-pg/cnpg-i-machinery/pkg/pluginhelper/validation"
	"github.com/cloudnative-pg/cnpg-i/pkg/identity"
	"github.com/cloudnative-pg/cnpg-i/pkg/lifecycle"
	"github.com/cloudnative-pg/cnpg-i/pkg/operator"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

const (
	pluginName     = "cnpg-i-hello-world.cloudnative-pg.io"
	labelsKey      = "labels"
	annotationsKey = "annotations"
)

var defaultMetadata = map[string]string{"plugin-metadata": "default"}

type identityServer struct {
	identity.UnimplementedIdentityServer
}

func (identityServer) GetPluginMetadata(context.Context, *identity.GetPluginMetadataRequest) (*identity.GetPluginMetadataResponse, error) {
	return &identity.GetPluginMetadataResponse{
		Name:        pluginName,
		Version:     "0.1.0",
		DisplayName: "Hello world, in Go on cnpg-i-machinery (interop test)",
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

// configuration is what the parameters ask for.
type configuration struct {
	labels      map[string]string
	annotations map[string]string
}

// parse reads one JSON-object parameter; missing or empty means the default.
func parse(helper *common.Plugin, key string) (map[string]string, *operator.ValidationError) {
	raw := helper.Parameters[key]
	result := map[string]string{}
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &result); err != nil {
			return nil, validation.BuildErrorForParameter(helper, key, err.Error())
		}
	}
	if len(result) == 0 {
		return defaultMetadata, nil
	}
	return result, nil
}

// fromParameters returns the configuration and every parameter error.
func fromParameters(helper *common.Plugin) (configuration, []*operator.ValidationError) {
	var errs []*operator.ValidationError
	labels, err := parse(helper, labelsKey)
	if err != nil {
		errs = append(errs, err)
	}
	annotations, err := parse(helper, annotationsKey)
	if err != nil {
		errs = append(errs, err)
	}
	return configuration{labels: labels, annotations: annotations}, errs
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
		rpc(operator.OperatorCapability_RPC_TYPE_VALIDATE_CLUSTER_CHANGE),
		rpc(operator.OperatorCapability_RPC_TYPE_MUTATE_CLUSTER),
		rpc(operator.OperatorCapability_RPC_TYPE_SET_STATUS_IN_CLUSTER),
	}}, nil
}

func (operatorServer) ValidateClusterCreate(_ context.Context, r *operator.OperatorValidateClusterCreateRequest) (*operator.OperatorValidateClusterCreateResult, error) {
	cluster, err := decoder.DecodeClusterLenient(r.GetDefinition())
	if err != nil {
		return nil, err
	}
	_, errs := fromParameters(common.NewPlugin(*cluster, pluginName))
	return &operator.OperatorValidateClusterCreateResult{ValidationErrors: errs}, nil
}

func (operatorServer) ValidateClusterChange(_ context.Context, r *operator.OperatorValidateClusterChangeRequest) (*operator.OperatorValidateClusterChangeResult, error) {
	oldCluster, err := decoder.DecodeClusterLenient(r.GetOldCluster())
	if err != nil {
		return nil, err
	}
	newCluster, err := decoder.DecodeClusterLenient(r.GetNewCluster())
	if err != nil {
		return nil, err
	}
	newHelper := common.NewPlugin(*newCluster, pluginName)
	_, errs := fromParameters(newHelper)
	oldLabels, oldErr := parse(common.NewPlugin(*oldCluster, pluginName), labelsKey)
	newLabels, newErr := parse(newHelper, labelsKey)
	if oldErr == nil && newErr == nil && !equality.Semantic.DeepEqual(oldLabels, newLabels) {
		errs = append(errs, validation.BuildErrorForParameter(newHelper, labelsKey, "Labels cannot be changed"))
	}
	return &operator.OperatorValidateClusterChangeResult{ValidationErrors: errs}, nil
}

func (operatorServer) MutateCluster(_ context.Context, r *operator.OperatorMutateClusterRequest) (*operator.OperatorMutateClusterResult, error) {
	cluster, err := decoder.DecodeClusterLenient(r.GetDefinition())
	if err != nil {
		return nil, err
	}
	helper := common.NewPlugin(*cluster, pluginName)
	if helper.PluginIndex < 0 {
		return &operator.OperatorMutateClusterResult{}, nil
	}
	mutated := cluster.DeepCopy()
	entry := &mutated.Spec.Plugins[helper.PluginIndex]
	if entry.Parameters == nil {
		entry.Parameters = map[string]string{}
	}
	encodedDefault, err := json.Marshal(defaultMetadata)
	if err != nil {
		return nil, err
	}
	for _, key := range []string{labelsKey, annotationsKey} {
		if entry.Parameters[key] == "" {
			entry.Parameters[key] = string(encodedDefault)
		}
	}
	patch, err := object.CreatePatch(mutated, cluster)
	if err != nil {
		return nil, err
	}
	return &operator.OperatorMutateClusterResult{JsonPatch: patch}, nil
}

type status struct {
	Enabled bool `json:"enabled"`
}

func (operatorServer) SetStatusInCluster(_ context.Context, r *operator.SetStatusInClusterRequest) (*operator.SetStatusInClusterResponse, error) {
	cluster, err := decoder.DecodeClusterLenient(r.GetCluster())
	if err != nil {
		return nil, err
	}
	var entry *apiv1.PluginStatus
	for i := range cluster.Status.PluginStatus {
		if cluster.Status.PluginStatus[i].Name == pluginName {
			entry = &cluster.Status.PluginStatus[i]
		}
	}
	if entry == nil {
		return nil, errors.New("plugin entry not found")
	}
	var current status
	if entry.Status != "" {
		if err := json.Unmarshal([]byte(entry.Status), &current); err != nil {
			return nil, err
		}
	}
	if current.Enabled {
		return clusterstatus.NewSetStatusInClusterResponseBuilder().NoOpResponse(), nil
	}
	return clusterstatus.NewSetStatusInClusterResponseBuilder().JSONStatusResponse(status{Enabled: true})
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
	kind, err := object.GetKind(r.GetObjectDefinition())
	if err != nil {
		return nil, err
	}
	if kind != "Pod" {
		return &lifecycle.OperatorLifecycleResponse{}, nil
	}
	cluster, err := decoder.DecodeClusterLenient(r.GetClusterDefinition())
	if err != nil {
		return nil, err
	}
	config, errs := fromParameters(common.NewPlugin(*cluster, pluginName))
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid parameters: %s", errs[0].GetMessage())
	}
	pod, err := decoder.DecodePodJSON(r.GetObjectDefinition())
	if err != nil {
		return nil, err
	}
	mutated := pod.DeepCopy()
	if err := object.InjectPluginInitContainerSidecarSpec(&mutated.Spec, &corev1.Container{
		Name:  "pauser",
		Image: "registry.k8s.io/pause:3.10",
	}, false); err != nil {
		return nil, err
	}
	if mutated.Labels == nil {
		mutated.Labels = map[string]string{}
	}
	if mutated.Annotations == nil {
		mutated.Annotations = map[string]string{}
	}
	for key, value := range config.labels {
		mutated.Labels[key] = value
	}
	for key, value := range config.annotations {
		mutated.Annotations[key] = value
	}
	patch, err := object.CreatePatch(mutated, pod)
	if err != nil {
		return nil, err
	}
	return &lifecycle.OperatorLifecycleResponse{JsonPatch: patch}, nil
}

func main() {
	cmd := http.CreateMainCmd(identityServer{}, func(server *grpc.Server) error {
		operator.RegisterOperatorServer(server, operatorServer{})
		lifecycle.RegisterOperatorLifecycleServer(server, lifecycleServer{})
		return nil
	})
	cmd.Use = "plugin"
	root := &cobra.Command{Use: "cnpgi-go-hello"}
	root.AddCommand(cmd)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
