//! libFuzzer's entry for `cnpgi_fuzz_targets::cluster_wire` (fuzz/targets/src/cluster_wire.rs), which says what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cnpgi_fuzz_targets::cluster_wire(data));
