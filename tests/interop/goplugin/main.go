// A CNPG-I plugin written the way upstream Go plugins are written: cnpg-i's
// stubs, and cnpg-i-machinery's helpers for everything else (CreateMainCmd,
// decoder, common.NewPlugin, validation.BuildErrorForParameter,
// clusterstatus, object.CreatePatch and object.GetKind), so that cnpgi-operator
// is tested against the conventions real Go plugins follow, not ours.
//
// It reads one parameter, "color" (red or blue, default blue): it validates
// it on create, refuses to change it, writes the default back into the
// Cluster, reports {"color": ...} as its status (requiring its status entry,
// as upstream's hello-world does), and labels every instance Pod with
// "go-plugin: <color>". Its ReconcilerHooks (on Clusters) ask for a requeue
// after 7 seconds while the Cluster carries the annotation
// "go-plugin/requeue", stop the chain with "go-plugin/terminate", and
// otherwise continue.
//
// Its instance-side services (instance.go) keep WAL files and base backups
// in a directory: WAL, Backup, RestoreJobHooks, Postgres and Metrics.
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
	"github.com/cloudnative-pg/cnpg-i/pkg/backup"
	"github.com/cloudnative-pg/cnpg-i/pkg/identity"
	"github.com/cloudnative-pg/cnpg-i/pkg/lifecycle"
	"github.com/cloudnative-pg/cnpg-i/pkg/metrics"
	"github.com/cloudnative-pg/cnpg-i/pkg/operator"
	"github.com/cloudnative-pg/cnpg-i/pkg/postgres"
	"github.com/cloudnative-pg/cnpg-i/pkg/reconciler"
	restore "github.com/cloudnative-pg/cnpg-i/pkg/restore/job"
	"github.com/cloudnative-pg/cnpg-i/pkg/wal"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

const (
	pluginName   = "cnpgi-go-plugin.example.com"
	colorKey     = "color"
	defaultColor = "blue"
	podLabel     = "go-plugin"
)

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
		service(identity.PluginCapability_Service_TYPE_RECONCILER_HOOKS),
		service(identity.PluginCapability_Service_TYPE_WAL_SERVICE),
		service(identity.PluginCapability_Service_TYPE_BACKUP_SERVICE),
		service(identity.PluginCapability_Service_TYPE_RESTORE_JOB),
		service(identity.PluginCapability_Service_TYPE_POSTGRES),
		service(identity.PluginCapability_Service_TYPE_METRICS),
	}}, nil
}

func (identityServer) Probe(context.Context, *identity.ProbeRequest) (*identity.ProbeResponse, error) {
	return &identity.ProbeResponse{Ready: true}, nil
}

// color is the configured color, or the default.
func color(helper *common.Plugin) string {
	if value := helper.Parameters[colorKey]; value != "" {
		return value
	}
	return defaultColor
}

// validate reports a bad color the way machinery's helpers report it.
func validate(helper *common.Plugin) []*operator.ValidationError {
	if value := color(helper); value != "red" && value != "blue" {
		return []*operator.ValidationError{validation.BuildErrorForParameter(helper, colorKey, "must be red or blue")}
	}
	return nil
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
	return &operator.OperatorValidateClusterCreateResult{ValidationErrors: validate(common.NewPlugin(*cluster, pluginName))}, nil
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
	oldHelper := common.NewPlugin(*oldCluster, pluginName)
	newHelper := common.NewPlugin(*newCluster, pluginName)
	errs := validate(newHelper)
	if color(oldHelper) != color(newHelper) {
		errs = append(errs, validation.BuildErrorForParameter(newHelper, colorKey, "cannot be changed"))
	}
	return &operator.OperatorValidateClusterChangeResult{ValidationErrors: errs}, nil
}

func (operatorServer) MutateCluster(_ context.Context, r *operator.OperatorMutateClusterRequest) (*operator.OperatorMutateClusterResult, error) {
	cluster, err := decoder.DecodeClusterLenient(r.GetDefinition())
	if err != nil {
		return nil, err
	}
	helper := common.NewPlugin(*cluster, pluginName)
	if helper.PluginIndex < 0 || helper.Parameters[colorKey] != "" {
		return &operator.OperatorMutateClusterResult{}, nil
	}
	mutated := cluster.DeepCopy()
	entry := &mutated.Spec.Plugins[helper.PluginIndex]
	if entry.Parameters == nil {
		entry.Parameters = map[string]string{}
	}
	entry.Parameters[colorKey] = defaultColor
	patch, err := object.CreatePatch(mutated, cluster)
	if err != nil {
		return nil, err
	}
	return &operator.OperatorMutateClusterResult{JsonPatch: patch}, nil
}

// status is what this plugin keeps in its status.pluginStatus entry.
type status struct {
	Color string `json:"color"`
}

func (operatorServer) SetStatusInCluster(_ context.Context, r *operator.SetStatusInClusterRequest) (*operator.SetStatusInClusterResponse, error) {
	cluster, err := decoder.DecodeClusterLenient(r.GetCluster())
	if err != nil {
		return nil, err
	}
	// As upstream's hello-world: the operator writes the entry first.
	var entry *apiv1.PluginStatus
	for i := range cluster.Status.PluginStatus {
		if cluster.Status.PluginStatus[i].Name == pluginName {
			entry = &cluster.Status.PluginStatus[i]
		}
	}
	if entry == nil {
		return nil, errors.New("plugin entry not found")
	}
	want := status{Color: color(common.NewPlugin(*cluster, pluginName))}
	var have status
	if entry.Status != "" {
		if err := json.Unmarshal([]byte(entry.Status), &have); err != nil {
			return nil, err
		}
	}
	if have == want {
		return clusterstatus.NewSetStatusInClusterResponseBuilder().NoOpResponse(), nil
	}
	return clusterstatus.NewSetStatusInClusterResponseBuilder().JSONStatusResponse(want)
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
	pod, err := decoder.DecodePodJSON(r.GetObjectDefinition())
	if err != nil {
		return nil, err
	}
	mutated := pod.DeepCopy()
	if mutated.Labels == nil {
		mutated.Labels = map[string]string{}
	}
	mutated.Labels[podLabel] = color(common.NewPlugin(*cluster, pluginName))
	patch, err := object.CreatePatch(mutated, pod)
	if err != nil {
		return nil, err
	}
	return &lifecycle.OperatorLifecycleResponse{JsonPatch: patch}, nil
}

type reconcilerServer struct {
	reconciler.UnimplementedReconcilerHooksServer
}

func (reconcilerServer) GetCapabilities(context.Context, *reconciler.ReconcilerHooksCapabilitiesRequest) (*reconciler.ReconcilerHooksCapabilitiesResult, error) {
	return &reconciler.ReconcilerHooksCapabilitiesResult{ReconcilerCapabilities: []*reconciler.ReconcilerHooksCapability{
		{Kind: reconciler.ReconcilerHooksCapability_KIND_CLUSTER},
	}}, nil
}

func hook(r *reconciler.ReconcilerHooksRequest) (*reconciler.ReconcilerHooksResult, error) {
	cluster, err := decoder.DecodeClusterLenient(r.GetClusterDefinition())
	if err != nil {
		return nil, err
	}
	if _, ok := cluster.Annotations["go-plugin/terminate"]; ok {
		return &reconciler.ReconcilerHooksResult{Behavior: reconciler.ReconcilerHooksResult_BEHAVIOR_TERMINATE}, nil
	}
	if _, ok := cluster.Annotations["go-plugin/requeue"]; ok {
		return &reconciler.ReconcilerHooksResult{Behavior: reconciler.ReconcilerHooksResult_BEHAVIOR_REQUEUE, RequeueAfter: 7}, nil
	}
	return &reconciler.ReconcilerHooksResult{Behavior: reconciler.ReconcilerHooksResult_BEHAVIOR_CONTINUE}, nil
}

func (reconcilerServer) Pre(_ context.Context, r *reconciler.ReconcilerHooksRequest) (*reconciler.ReconcilerHooksResult, error) {
	return hook(r)
}

func (reconcilerServer) Post(_ context.Context, r *reconciler.ReconcilerHooksRequest) (*reconciler.ReconcilerHooksResult, error) {
	return hook(r)
}

func main() {
	cmd := http.CreateMainCmd(identityServer{}, func(server *grpc.Server) error {
		operator.RegisterOperatorServer(server, operatorServer{})
		lifecycle.RegisterOperatorLifecycleServer(server, lifecycleServer{})
		reconciler.RegisterReconcilerHooksServer(server, reconcilerServer{})
		wal.RegisterWALServer(server, walServer{})
		backup.RegisterBackupServer(server, backupServer{})
		restore.RegisterRestoreJobHooksServer(server, restoreServer{})
		postgres.RegisterPostgresServer(server, postgresServer{})
		metrics.RegisterMetricsServer(server, metricsServer{})
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
