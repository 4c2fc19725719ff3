//! libFuzzer's entry for `cnpgi_fuzz_targets::cluster_file` (fuzz/targets/src/cluster_file.rs), which says what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cnpgi_fuzz_targets::cluster_file(data));
