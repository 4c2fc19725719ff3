//! libFuzzer's entry for `cnpgi_fuzz_targets::json_patch` (fuzz/targets/src/json_patch.rs), which says what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cnpgi_fuzz_targets::json_patch(data));
