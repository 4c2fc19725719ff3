//! `cnpgi-wal-archive plugin [FLAGS]`: serves the plugin. See the README.

// mimalloc, as in the other binaries: JSON decoding allocates a lot.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cnpgi_wal_archive::command().execute()
}
