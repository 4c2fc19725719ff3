//! `cnpgi-example-low-level plugin [FLAGS]`: serves the plugin.

fn main() -> std::process::ExitCode {
    cnpgi_example_low_level::command().execute()
}
