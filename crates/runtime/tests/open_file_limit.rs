//! The proxies raise their soft open-file limit at start-up. Its own test binary: it changes
//! the limit of the whole process.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

#[test]
fn a_low_soft_limit_is_raised_to_the_hard_one() {
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let low = 256.min(hard);
    setrlimit(Resource::RLIMIT_NOFILE, low, hard).unwrap();
    let raised = ctcp_runtime::app::raise_open_file_limit().unwrap();
    let (soft, hard_after) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    assert_eq!(hard_after, hard, "the hard limit is left alone");
    assert_eq!(soft, hard.min(1 << 20));
    if low < soft {
        assert_eq!(raised, Some((low, soft)));
    }
    // Already raised: nothing to do.
    assert_eq!(ctcp_runtime::app::raise_open_file_limit().unwrap(), None);
}
