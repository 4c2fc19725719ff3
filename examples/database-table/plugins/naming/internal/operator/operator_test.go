package operator

import (
	"context"
	"testing"

	"github.com/cloudnative-pg/cnpg-i/pkg/operator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestOnlyTheValidationsAreAdvertised(t *testing.T) {
	answer, err := Implementation{}.GetCapabilities(context.Background(), &operator.OperatorCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var rpcs []operator.OperatorCapability_RPC_Type
	for _, capability := range answer.GetCapabilities() {
		rpcs = append(rpcs, capability.GetRpc().GetType())
	}
	if len(rpcs) != 2 || rpcs[0] != operator.OperatorCapability_RPC_TYPE_VALIDATE_CLUSTER_CREATE ||
		rpcs[1] != operator.OperatorCapability_RPC_TYPE_VALIDATE_CLUSTER_CHANGE {
		t.Fatalf("advertised %v", rpcs)
	}
	_, err = Implementation{}.MutateCluster(context.Background(), &operator.OperatorMutateClusterRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("MutateCluster: %v", err)
	}
}

func TestAChangeIsValidatedOnTheNewTable(t *testing.T) {
	old := []byte(`{"kind": "DatabaseTable", "spec": {"name": "users", "columns": [{"name": "id"}]}}`)
	changed := []byte(`{"kind": "DatabaseTable", "spec": {"name": "users", "columns": [{"name": "id"}, {"name": "order"}]}}`)
	answer, err := Implementation{}.ValidateClusterChange(context.Background(),
		&operator.OperatorValidateClusterChangeRequest{OldCluster: old, NewCluster: changed})
	if err != nil {
		t.Fatal(err)
	}
	errors := answer.GetValidationErrors()
	if len(errors) != 1 || errors[0].GetValue() != "order" ||
		len(errors[0].GetPathComponents()) != 4 || errors[0].GetPathComponents()[2] != "1" {
		t.Fatalf("%v", errors)
	}
	answer, err = Implementation{}.ValidateClusterChange(context.Background(),
		&operator.OperatorValidateClusterChangeRequest{OldCluster: changed, NewCluster: old})
	if err != nil || len(answer.GetValidationErrors()) != 0 {
		t.Fatalf("%v %v", answer, err)
	}
}

func TestAClusterIsAnInvalidArgument(t *testing.T) {
	cluster := []byte(`{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "spec": {"instances": 1}}`)
	_, err := Implementation{}.ValidateClusterCreate(context.Background(),
		&operator.OperatorValidateClusterCreateRequest{Definition: cluster})
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() !=
		`the definition is not a DatabaseTable (example.cnpgi.io): its kind is "Cluster"` {
		t.Fatalf("%v", err)
	}
}
