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
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cloudnative-pg/machinery/pkg/log"
	"github.com/go-logr/logr"
	"github.com/spf13/cobra"

	pluginCmd "github.com/cnpgi-rs/cnpgi-rs/examples/database-table/plugins/naming/internal/cmd"
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
			if err := logSettings(cmd); err != nil {
				return err
			}
			logFlags.ConfigureLogging()
			// The logger in the context: machinery's command then keeps it.
			logger := pluginCmd.QuietStop(log.GetLogger().GetLogger().WithName(identity.Name))
			cmd.SetContext(logr.NewContext(cmd.Context(), logger))
			return nil
		},
	}
	logFlags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().String("log-format", "json",
		"Log line format: json, or text (the cnpgi-rs SDK's flag; sets --zap-encoder) (env LOG_FORMAT)")
	root.PersistentFlags().Lookup("log-level").Usage += " (env LOG_LEVEL)"
	root.AddCommand(pluginCmd.NewPluginCmd())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}

// logSettings applies --log-format, and LOG_FORMAT and LOG_LEVEL when their
// flags are not given (the cnpgi-rs SDK's names), to machinery's logging
// flags.
func logSettings(cmd *cobra.Command) error {
	flags := cmd.Flags()
	for flag, env := range map[string]string{"log-format": "LOG_FORMAT", "log-level": "LOG_LEVEL"} {
		if value, set := os.LookupEnv(env); set && value != "" && !flags.Changed(flag) {
			if err := flags.Set(flag, value); err != nil {
				return fmt.Errorf("%s=%q: %w", env, value, err)
			}
		}
	}
	format, err := flags.GetString("log-format")
	if err != nil {
		return err
	}
	encoders := map[string]string{"json": "json", "text": "console"}
	encoder, known := encoders[format]
	if !known {
		return fmt.Errorf("--log-format (LOG_FORMAT) %q: expected json or text", format)
	}
	if !flags.Changed("zap-encoder") {
		return flags.Set("zap-encoder", encoder)
	}
	return nil
}
