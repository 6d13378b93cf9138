//! Registry auth configs: the `.dockerconfigjson` (and legacy `.dockercfg`) of the pull
//! Secrets an ImagePullJob names, which the daemon turns into CRI credentials for an
//! image. Input: the image reference, NUL, the config bytes (not necessarily UTF-8).
#![no_main]

use std::collections::BTreeMap;

use inplace_daemon::puller::auth::{credentials_for, registry_of};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (image, config) = match data.iter().position(|b| *b == 0) {
        Some(i) => (String::from_utf8_lossy(&data[..i]), &data[i + 1..]),
        None => ("nginx".into(), data),
    };
    let _ = registry_of(&image);
    for key in [".dockerconfigjson", ".dockercfg"] {
        let secret = BTreeMap::from([(key.to_owned(), config.to_vec())]);
        let _ = credentials_for(&image, "ns/secret", &secret);
    }
});
