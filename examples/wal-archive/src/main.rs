//! `cnpgi-wal-archive plugin [FLAGS]`: serves the plugin. See the README.

fn main() -> std::process::ExitCode {
    cnpgi_wal_archive::command().execute()
}
