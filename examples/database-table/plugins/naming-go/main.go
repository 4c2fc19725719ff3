// naming.tables.example.cnpgi.io: a CNPG-I plugin in Go, on upstream's
// cnpg-i and cnpg-i-machinery modules, for a resource that is not a
// CloudNativePG Cluster.
//
// A policy for DatabaseTables (example.cnpgi.io/v1, the cnpgi-rs
// DatabaseTable example): it refuses a table or column named after an SQL
// reserved word, through the Operator service's ValidateClusterCreate and
// ValidateClusterChange (CNPG-I calls every resource a "cluster"), each
// error with its field path (spec.name, spec.columns[1].name). It serves
// Identity and Operator, nothing else: every other RPC answers
// UNIMPLEMENTED.
//
//	naming plugin --plugin-path DIR                       a Unix socket DIR/naming.tables.example.cnpgi.io
//	naming plugin --server-address ADDR --server-cert F --server-key F --client-cert F
//	              [--register-with HOST:PORT --registration-ca F
//	               [--registration-cert F --registration-key F] [--advertise-address HOST:PORT]]
//
// With --register-with (CNPGI_REGISTER_WITH) it registers itself with a
// cnpgi-rs operator and keeps heart-beating (cnpgi.registration.v1). Every
// flag can come from the environment variable the cnpgi-rs SDK reads for it.
// SIGTERM or SIGINT stops it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/cloudnative-pg/machinery/pkg/log"
	"github.com/spf13/cobra"

	"github.com/cnpgi-rs/cnpgi-rs/examples/database-table/plugins/naming/internal/cmd"
	"github.com/cnpgi-rs/cnpgi-rs/examples/database-table/plugins/naming/internal/identity"
)

func main() {
	cobra.EnableTraverseRunHooks = true

	logFlags := &log.Flags{}
	root := &cobra.Command{
		Use:     "naming",
		Short:   "naming.tables.example.cnpgi.io: refuses DatabaseTables named after SQL reserved words",
		Version: identity.Version,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			logFlags.ConfigureLogging()
			// The logger in the context: machinery's command then keeps it.
			cmd.SetContext(log.IntoContext(cmd.Context(), log.GetLogger().WithName(identity.Name)))
			return nil
		},
	}
	logFlags.AddFlags(root.PersistentFlags())
	root.AddCommand(cmd.NewPluginCmd())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}
