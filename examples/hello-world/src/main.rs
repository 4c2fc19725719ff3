//! `cnpg-i-hello-world plugin [FLAGS]`: serves the plugin. See the README.

fn main() -> std::process::ExitCode {
    cnpg_i_hello_world::command().execute()
}
