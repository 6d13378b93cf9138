//! Image references, from CloneSet templates, ImagePullJobs and NodeImages: parsed and
//! normalised (`inplace_proto::image_ref`), split into a NodeImage name and tag by the
//! controller, checked by the daemon before a pull, and the registry of its credentials.
#![no_main]

use inplace_controller::imagepulljob::plan::split_image;
use inplace_daemon::puller::auth::{check_reference, registry_of};
use inplace_daemon::puller::plan::TagKey;
use inplace_proto::image_ref::{self, ImageRef};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let parts = image_ref::split(text);
    let _ = parts.with_default_tag();
    if let Ok(r) = ImageRef::parse(text) {
        let normalized = r.normalized();
        // The normal form is a reference too, and normal already.
        match ImageRef::parse(&normalized) {
            Ok(again) => assert_eq!(again.normalized(), normalized, "{text:?}"),
            Err(e) => panic!("{text:?} normalises to {normalized:?}, which does not parse: {e}"),
        }
        let _ = (r.registry(), r.repository(), r.tag(), r.digest());
    }
    let _ = check_reference(text);
    let _ = registry_of(text);
    let (name, tag) = split_image(text);
    let key = TagKey::new(name, tag);
    let _ = check_reference(&key.reference());
});
