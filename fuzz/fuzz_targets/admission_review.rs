//! libFuzzer's entry for `cnpgi_fuzz_targets::admission_review` (fuzz/targets/src/admission_review.rs), which says what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cnpgi_fuzz_targets::admission_review(data));
