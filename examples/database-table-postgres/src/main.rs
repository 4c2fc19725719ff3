//! `database-table-postgres plugin [FLAGS]`: serves the plugin (over a Unix
//! socket with `--plugin-path`, or mutual TLS), as every cnpgi-rs plugin.

fn main() -> std::process::ExitCode {
    cnpgi_example_database_table_postgres::plugin().command().execute()
}
