//! Pre-shared key files: generating one (`keygen`), and the short fingerprint operators
//! compare between the two gateways without showing the key.

use rand::RngCore;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a key file could not be written.
#[derive(Debug, Error)]
pub enum KeyFileError {
    /// The file exists and overwriting was not asked for.
    #[error("{} already exists; pass --force to replace it (both gateways need the same key)", .0.display())]
    Exists(PathBuf),
    /// Creating or writing the file failed.
    #[error("cannot write key file {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// A fresh key: 32 bytes from the operating system's random source.
pub fn generate() -> [u8; 32] {
    let mut key = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut key);
    key
}

/// The key as its file holds it: 64 lowercase hex digits.
pub fn to_hex(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// A short, non-secret fingerprint of the key: the first 8 hex digits of its SHA-256,
/// labelled `SHA256:` so no one mistakes it for the key. 32 bits tell two keys apart
/// reliably and reveal nothing usable about a 256-bit key.
pub fn fingerprint(key: &[u8; 32]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, key);
    let hex: String = d.as_ref()[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("SHA256:{hex}")
}

/// Writes `key` to `path` as a key file (64 hex digits and a newline) readable by its
/// owner only (mode 0600). An existing file is kept unless `force`.
///
/// # Errors
/// [`KeyFileError::Exists`] without `force`, or the I/O error.
pub fn write_key_file(path: &Path, key: &[u8; 32], force: bool) -> Result<(), KeyFileError> {
    let io_err = |source| KeyFileError::Io {
        path: path.to_owned(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    if force {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path).map_err(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            KeyFileError::Exists(path.to_owned())
        } else {
            io_err(e)
        }
    })?;
    // The mode above applies only to a file created now; a replaced one is narrowed here
    // before the new key goes in.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io_err)?;
    }
    f.write_all(format!("{}\n", to_hex(key)).as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io_err)
}

/// The `keygen` subcommand: a fresh key written to `out` (mode 0600; an existing file
/// only with `force`), or printed to stdout when `out` is `None`. The fingerprint goes
/// to stdout with a file, to stderr with stdout, so `keygen > FILE` holds only the key.
///
/// # Errors
/// As [`write_key_file`].
pub fn keygen(out: Option<&Path>, force: bool) -> Result<(), KeyFileError> {
    let key = generate();
    match out {
        Some(path) => {
            write_key_file(path, &key, force)?;
            println!(
                "wrote a new key to {} (mode 0600); key fingerprint {} (a hash, not the key). \
                 Copy the file to the other gateway.",
                path.display(),
                fingerprint(&key)
            );
        }
        None => {
            println!("{}", to_hex(&key));
            eprintln!(
                "key fingerprint {} (a hash, not the key)",
                fingerprint(&key)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_short_labelled_and_not_the_key() {
        let f = fingerprint(&[0xab; 32]);
        assert_eq!(f.len(), "SHA256:".len() + 8);
        assert!(f.starts_with("SHA256:"));
        assert!(!to_hex(&[0xab; 32]).contains(&f["SHA256:".len()..]));
        assert_ne!(f, fingerprint(&[0xac; 32]));
        // The first four bytes of SHA-256 of 32 zero bytes.
        assert_eq!(fingerprint(&[0; 32]), "SHA256:66687aad");
    }

    #[test]
    fn written_key_files_are_private_loadable_and_not_overwritten() {
        let dir = std::env::temp_dir().join(format!("ctcp-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("psk");
        let key = generate();
        write_key_file(&path, &key, false).unwrap();
        assert_eq!(ctcp_config::load_psk(Some(&path)).unwrap(), key);
        assert_eq!(ctcp_config::key_file_warning(&path), None);
        let other = generate();
        assert_ne!(key, other, "fresh randomness each time");
        assert!(matches!(
            write_key_file(&path, &other, false),
            Err(KeyFileError::Exists(_))
        ));
        assert_eq!(ctcp_config::load_psk(Some(&path)).unwrap(), key);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        write_key_file(&path, &other, true).unwrap();
        assert_eq!(ctcp_config::load_psk(Some(&path)).unwrap(), other);
        assert_eq!(ctcp_config::key_file_warning(&path), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
