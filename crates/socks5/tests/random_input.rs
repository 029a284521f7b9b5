//! Random bytes never panic the codec, and never make it consume more than it was given.

use ctcp_socks5::{AuthPolicy, ServerHandshake, TargetAddr};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn random_input_never_panics(input in proptest::collection::vec(any::<u8>(), 0..600), split in 0usize..600, userpass in any::<bool>()) {
        let policy = if userpass { AuthPolicy::UserPass(vec![("u".into(), "p".into())]) } else { AuthPolicy::NoAuth };
        let mut hs = ServerHandshake::new(policy);
        let split = split.min(input.len());
        let mut consumed = 0;
        for end in [split, input.len()] {
            if end < consumed { continue; }
            match hs.feed(&input[consumed..end]) {
                Ok(step) => { prop_assert!(consumed + step.consumed <= end); consumed += step.consumed; }
                Err(e) => { let _ = ServerHandshake::failure_bytes(&e); break; }
            }
        }
        let _ = TargetAddr::decode(&input);
    }
}
