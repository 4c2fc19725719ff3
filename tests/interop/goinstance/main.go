// A client of the instance-side CNPG-I services set up like CloudNativePG's
// instance manager (internal/cnpi/plugin): grpc.NewClient("unix://<socket>")
// with insecure credentials, then GetPluginMetadata, GetPluginCapabilities
// and GetCapabilities of each advertised service, on upstream cnpg-i's
// stubs. Two modes:
//
//   - plugin mode (-socket): calls a plugin's WAL (Archive, Restore),
//     Backup, RestoreJobHooks, Postgres and Metrics services the way
//     CloudNativePG does, and checks the answers (metrics go through
//     client_golang's NewDesc and NewConstMetric, as CloudNativePG's
//     collector builds them);
//   - scrape mode (-scrape URL): fetches a /metrics page and parses it with
//     Prometheus' own text parser (prometheus/common/expfmt), checking that
//     the -expect families are there.
//
// Each check prints "ok ..." or "FAIL ..."; the exit code is 1 on any failure.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cloudnative-pg/cnpg-i/pkg/backup"
	"github.com/cloudnative-pg/cnpg-i/pkg/identity"
	"github.com/cloudnative-pg/cnpg-i/pkg/metrics"
	"github.com/cloudnative-pg/cnpg-i/pkg/postgres"
	restore "github.com/cloudnative-pg/cnpg-i/pkg/restore/job"
	"github.com/cloudnative-pg/cnpg-i/pkg/wal"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

var passed, failed int
var side string

func check(rpc, what string, ok bool, detail string) {
	if ok {
		passed++
		fmt.Printf("ok   %s: %s: %s\n", side, rpc, what)
	} else {
		failed++
		fmt.Printf("FAIL %s: %s: %s: %s\n", side, rpc, what, detail)
	}
}

func main() {
	socket := flag.String("socket", "", "the plugin's Unix socket")
	name := flag.String("name", "", "the plugin's name")
	clusterFile := flag.String("cluster", "", "the Cluster as JSON (with the plugin's parameters)")
	archive := flag.String("archive", "", "the plugin's archive directory (to check what it stored)")
	pgdata := flag.String("pgdata", "", "a PGDATA to back up and restore (the plugin's pgdata parameter)")
	scrape := flag.String("scrape", "", "a /metrics URL to parse with Prometheus' text parser")
	expect := flag.String("expect", "", "comma-separated metric families the scrape must have")
	label := flag.String("label", "", "name of this run, printed in every line")
	flag.Parse()

	if *scrape != "" {
		side = "Prometheus text parser -> " + *label
		scrapeCheck(*scrape, strings.Split(*expect, ","))
	} else {
		side = "Go client (as CloudNativePG's instance manager) -> " + *label
		pluginChecks(*socket, *name, *clusterFile, *archive, *pgdata)
	}
	fmt.Printf("interop-go-instance: %d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}

func scrapeCheck(url string, expect []string) {
	client := http.Client{Timeout: 30 * time.Second}
	response, err := client.Get(url)
	if err != nil {
		check("GET /metrics", "answers", false, err.Error())
		return
	}
	defer response.Body.Close()
	check("GET /metrics", "answers 200", response.StatusCode == 200, response.Status)
	contentType := response.Header.Get("Content-Type")
	check("GET /metrics", "text format 0.0.4", expfmt.ResponseFormat(response.Header).FormatType() == expfmt.TypeTextPlain, contentType)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(response.Body)
	check("text format", "parses", err == nil, fmt.Sprint(err))
	for _, family := range expect {
		if family == "" {
			continue
		}
		found, ok := families[family]
		check("text format", "has "+family, ok && len(found.GetMetric()) > 0, fmt.Sprintf("families: %v", keys(families)))
	}
}

func keys(families map[string]*dto.MetricFamily) []string {
	names := make([]string, 0, len(families))
	for name := range families {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func pluginChecks(socket, name, clusterFile, archive, pgdata string) {
	cluster, err := os.ReadFile(clusterFile)
	if err != nil || !json.Valid(cluster) {
		check("setup", "the Cluster file is JSON", false, fmt.Sprint(err))
		return
	}
	connection, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		check("setup", "dial", false, err.Error())
		return
	}
	defer connection.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// LoadPlugin's sequence.
	metadata, err := identity.NewIdentityClient(connection).GetPluginMetadata(ctx, &identity.GetPluginMetadataRequest{})
	check("Identity/GetPluginMetadata", "names the plugin", err == nil && metadata.GetName() == name, fmt.Sprint(err, metadata))
	capabilities, err := identity.NewIdentityClient(connection).GetPluginCapabilities(ctx, &identity.GetPluginCapabilitiesRequest{})
	if err != nil {
		check("Identity/GetPluginCapabilities", "answers", false, err.Error())
		return
	}
	var services []identity.PluginCapability_Service_Type
	for _, capability := range capabilities.GetCapabilities() {
		services = append(services, capability.GetService().GetType())
	}
	for _, wanted := range []identity.PluginCapability_Service_Type{
		identity.PluginCapability_Service_TYPE_WAL_SERVICE,
		identity.PluginCapability_Service_TYPE_BACKUP_SERVICE,
		identity.PluginCapability_Service_TYPE_RESTORE_JOB,
		identity.PluginCapability_Service_TYPE_POSTGRES,
		identity.PluginCapability_Service_TYPE_METRICS,
	} {
		check("Identity/GetPluginCapabilities", "advertises "+wanted.String(), slices.Contains(services, wanted), fmt.Sprint(services))
	}

	walChecks(ctx, connection, cluster, archive, pgdata)
	backupChecks(ctx, connection, cluster, archive, pgdata)
	postgresChecks(ctx, connection, cluster)
	metricsChecks(ctx, connection, cluster)
}

func walChecks(ctx context.Context, connection grpc.ClientConnInterface, cluster []byte, archive, pgdata string) {
	client := wal.NewWALClient(connection)
	capabilities, err := client.GetCapabilities(ctx, &wal.WALCapabilitiesRequest{})
	var rpcs []wal.WALCapability_RPC_Type
	for _, capability := range capabilities.GetCapabilities() {
		rpcs = append(rpcs, capability.GetRpc().GetType())
	}
	check("WAL/GetCapabilities", "archive and restore", err == nil &&
		slices.Contains(rpcs, wal.WALCapability_RPC_TYPE_ARCHIVE_WAL) &&
		slices.Contains(rpcs, wal.WALCapability_RPC_TYPE_RESTORE_WAL), fmt.Sprint(err, rpcs))

	segment := "000000010000000000000007"
	source := filepath.Join(pgdata, "pg_wal", segment)
	contents := []byte("a WAL segment written by the Go client")
	if err := os.WriteFile(source, contents, 0o600); err != nil {
		check("WAL/Archive", "setup", false, err.Error())
		return
	}
	// CloudNativePG: PGDATA joined with %p, absolute.
	_, err = client.Archive(ctx, &wal.WALArchiveRequest{ClusterDefinition: cluster, SourceFileName: source})
	stored, readErr := os.ReadFile(filepath.Join(archive, segment))
	check("WAL/Archive", "stores the file", err == nil && readErr == nil && string(stored) == string(contents), fmt.Sprint(err, readErr))
	_, err = client.Archive(ctx, &wal.WALArchiveRequest{ClusterDefinition: cluster, SourceFileName: source})
	check("WAL/Archive", "the same file again is a success", err == nil, fmt.Sprint(err))
	if err := os.WriteFile(source, []byte("other content"), 0o600); err == nil {
		_, err = client.Archive(ctx, &wal.WALArchiveRequest{ClusterDefinition: cluster, SourceFileName: source})
		check("WAL/Archive", "other content under an archived name is refused", err != nil, "accepted")
	}

	destination := filepath.Join(pgdata, "pg_wal", "RECOVERYXLOG")
	_, err = client.Restore(ctx, &wal.WALRestoreRequest{ClusterDefinition: cluster, SourceWalName: segment, DestinationFileName: destination})
	restored, readErr := os.ReadFile(destination)
	check("WAL/Restore", "writes the archived file", err == nil && readErr == nil && string(restored) == string(contents), fmt.Sprint(err, readErr))
	_, err = client.Restore(ctx, &wal.WALRestoreRequest{ClusterDefinition: cluster, SourceWalName: "00000009.history", DestinationFileName: destination + ".missing"})
	_, statErr := os.Stat(destination + ".missing")
	check("WAL/Restore", "a missing file is NOT_FOUND and writes nothing", status.Code(err) == codes.NotFound && errors.Is(statErr, os.ErrNotExist), fmt.Sprint(err))
}

func backupChecks(ctx context.Context, connection grpc.ClientConnInterface, cluster []byte, archive, pgdata string) {
	client := backup.NewBackupClient(connection)
	capabilities, err := client.GetCapabilities(ctx, &backup.BackupCapabilitiesRequest{})
	check("Backup/GetCapabilities", "TYPE_BACKUP", err == nil && len(capabilities.GetCapabilities()) == 1 &&
		capabilities.GetCapabilities()[0].GetRpc().GetType() == backup.BackupCapability_RPC_TYPE_BACKUP, fmt.Sprint(err))
	// The Backup object CloudNativePG sends: method plugin, phase started.
	backupObject := []byte(`{"apiVersion":"postgresql.cnpg.io/v1","kind":"Backup","metadata":{"name":"go-backup","namespace":"default"},` +
		`"spec":{"cluster":{"name":"pg"},"method":"plugin","pluginConfiguration":{"name":"x"}},"status":{"phase":"started"}}`)
	result, err := client.Backup(ctx, &backup.BackupRequest{
		ClusterDefinition: cluster,
		BackupDefinition:  backupObject,
		Parameters:        map[string]string{"from": "go"},
	})
	check("Backup/Backup", "answers the backup", err == nil && result.GetBackupId() == "go-backup" && result.GetStoppedAt() >= result.GetStartedAt(), fmt.Sprint(err, result))
	_, statErr := os.Stat(filepath.Join(archive, "base", "go-backup", "PG_VERSION"))
	check("Backup/Backup", "copied PGDATA", statErr == nil, fmt.Sprint(statErr))

	jobs := restore.NewRestoreJobHooksClient(connection)
	kinds, err := jobs.GetCapabilities(ctx, &restore.RestoreJobHooksCapabilitiesRequest{})
	check("RestoreJobHooks/GetCapabilities", "KIND_RESTORE", err == nil && len(kinds.GetCapabilities()) == 1 &&
		kinds.GetCapabilities()[0].GetKind() == restore.RestoreJobHooksCapability_KIND_RESTORE, fmt.Sprint(err))
	// Restore into PGDATA: move the current one aside first, as a fresh Job volume.
	if err := os.Rename(pgdata, pgdata+".before"); err != nil {
		check("RestoreJobHooks/Restore", "setup", false, err.Error())
		return
	}
	answer, err := jobs.Restore(ctx, &restore.RestoreRequest{ClusterDefinition: cluster})
	_, statErr = os.Stat(filepath.Join(pgdata, "PG_VERSION"))
	check("RestoreJobHooks/Restore", "fills PGDATA and answers restore_config and envs", err == nil && statErr == nil &&
		strings.Contains(answer.GetRestoreConfig(), "restore_command") && len(answer.GetEnvs()) > 0, fmt.Sprint(err, statErr, answer))
	for _, env := range answer.GetEnvs() {
		check("RestoreJobHooks/Restore", "env "+env+" is NAME=VALUE", strings.Contains(env, "="), env)
	}
}

func postgresChecks(ctx context.Context, connection grpc.ClientConnInterface, cluster []byte) {
	client := postgres.NewPostgresClient(connection)
	capabilities, err := client.GetCapabilities(ctx, &postgres.PostgresCapabilitiesRequest{})
	check("Postgres/GetCapabilities", "TYPE_ENRICH_CONFIGURATION", err == nil && len(capabilities.GetCapabilities()) == 1 &&
		capabilities.GetCapabilities()[0].GetRpc().GetType() == postgres.PostgresCapability_RPC_TYPE_ENRICH_CONFIGURATION, fmt.Sprint(err))
	configs := map[string]string{"shared_buffers": "128MB", "archive_command": "/controller/manager wal-archive %p"}
	answer, err := client.EnrichConfiguration(ctx, &postgres.EnrichConfigurationRequest{
		Configs:           configs,
		ClusterDefinition: cluster,
		OperationType:     &postgres.OperationType{Type: postgres.OperationType_TYPE_RECONCILE},
	})
	complete := err == nil && len(answer.GetConfigs()) > len(configs)
	for key, value := range configs {
		complete = complete && answer.GetConfigs()[key] == value
	}
	check("Postgres/EnrichConfiguration", "answers the complete map, enriched", complete, fmt.Sprint(err, answer))
}

func metricsChecks(ctx context.Context, connection grpc.ClientConnInterface, cluster []byte) {
	client := metrics.NewMetricsClient(connection)
	defined, err := client.Define(ctx, &metrics.DefineMetricsRequest{ClusterDefinition: cluster})
	if err != nil {
		check("Metrics/Define", "answers", false, err.Error())
		return
	}
	// As CloudNativePG's GetMetricsDefinitions and sendPluginMetrics.
	descriptions := map[string]*prometheus.Desc{}
	types := map[string]prometheus.ValueType{}
	for _, metric := range defined.GetMetrics() {
		descriptions[metric.GetFqName()] = prometheus.NewDesc(metric.GetFqName(), metric.GetHelp(), metric.GetVariableLabels(), metric.GetConstLabels())
		types[metric.GetFqName()] = prometheus.ValueType(metric.GetValueType().GetType())
	}
	check("Metrics/Define", "defines metrics", len(descriptions) > 0, "none")
	collected, err := client.Collect(ctx, &metrics.CollectMetricsRequest{ClusterDefinition: cluster})
	if err != nil {
		check("Metrics/Collect", "answers", false, err.Error())
		return
	}
	built := 0
	for _, value := range collected.GetMetrics() {
		description, ok := descriptions[value.GetFqName()]
		if !ok {
			check("Metrics/Collect", value.GetFqName()+" is defined", false, "not defined")
			continue
		}
		if _, err := prometheus.NewConstMetric(description, types[value.GetFqName()], value.GetValue(), value.GetVariableLabels()...); err != nil {
			check("Metrics/Collect", value.GetFqName()+" makes a Prometheus metric", false, err.Error())
			continue
		}
		built++
	}
	check("Metrics/Collect", "every value makes a Prometheus metric", built == len(collected.GetMetrics()) && built > 0, fmt.Sprint(built))
}
