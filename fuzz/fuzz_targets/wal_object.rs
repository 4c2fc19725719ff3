//! libFuzzer's entry for `cnpgi_fuzz_targets::wal_object` (fuzz/targets/src/wal_object.rs), which says what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cnpgi_fuzz_targets::wal_object(data));
