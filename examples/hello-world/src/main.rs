//! `cnpg-i-hello-world plugin [FLAGS]`: serves the plugin. See the README.

// Decoding and diffing JSON allocate a lot: mimalloc makes a hook ~20% faster.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cnpg_i_hello_world::command().execute()
}
