//! Both config parsers on arbitrary text: errors, never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = ctcp_config::ForwardConfig::from_toml_str(text, "fuzz.toml");
        let _ = ctcp_config::ReverseConfig::from_toml_str(text, "fuzz.toml");
    }
});
