//! The simulated nodes' image stores, with a pull delay. Pure: no I/O and no clock.
//!
//! With `--pull-delay` the simulator keeps, per node, the images it holds and the pulls
//! under way: a container whose image changes in place starts only once the image is on
//! its node (a pull of `pull_delay` when it is not there nor being pulled; an image
//! pulled already costs nothing, one being pulled costs the rest of that pull), and the
//! node's NodeImage is answered as the daemon would ([`nodeimage_status`]): each spec tag
//! is pulled, reported `Pulling` (with its start time) and then `Succeeded` for the spec
//! tag's `version`. One pull serves both, as one containerd would.

use std::collections::{BTreeMap, HashMap};

use inplace_proto::nodeimage::{
    ImagePullPhase, ImageStatus, ImageTagStatus, NodeImageSpec, NodeImageStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::model::{Ms, image_id};

/// One node's images: full reference → (pull start, when it is or will be there).
type NodeStore = HashMap<String, (Ms, Ms)>;

/// The image stores of every simulated node.
#[derive(Debug, Default)]
pub struct ImageStores {
    pull_delay: Ms,
    nodes: HashMap<String, NodeStore>,
    /// Pulls started (each image once per node).
    pub pulls: u64,
}

impl ImageStores {
    pub fn new(pull_delay: Ms) -> Self {
        Self {
            pull_delay: pull_delay.max(0),
            ..Self::default()
        }
    }

    /// When `image` is on `node`: now or earlier when it is there, the end of the pull
    /// under way, or `now + pull_delay` for a pull that starts now.
    pub fn available_at(&mut self, node: &str, image: &str, now: Ms) -> Ms {
        let store = self.nodes.entry(node.to_owned()).or_default();
        if let Some((_, at)) = store.get(image) {
            return *at;
        }
        let at = now + self.pull_delay;
        store.insert(image.to_owned(), (now, at));
        self.pulls += 1;
        at
    }

    /// (pull start, when it is there) of `image` on `node`, if a pull ever started.
    pub fn pull_of(&self, node: &str, image: &str) -> Option<(Ms, Ms)> {
        self.nodes.get(node)?.get(image).copied()
    }
}

/// The reference a NodeImage tag stands for: `name:tag`, or `name@digest` for a digest.
pub fn tag_reference(image: &str, tag: &str) -> String {
    if tag.contains(':') {
        format!("{image}@{tag}")
    } else {
        format!("{image}:{tag}")
    }
}

/// Whole seconds, as the API server stores a `Time`: a status read back compares equal.
fn time(ms: Ms) -> Option<Time> {
    Timestamp::from_second(ms.div_euclid(1_000)).ok().map(Time)
}

/// What the node reports for `spec` at `now`, starting the pulls of tags it does not
/// hold, and when to look again (the end of the earliest pull under way).
pub fn nodeimage_status(
    stores: &mut ImageStores,
    node: &str,
    spec: &NodeImageSpec,
    now: Ms,
) -> (NodeImageStatus, Option<Ms>) {
    let mut status = NodeImageStatus::default();
    let mut next: Option<Ms> = None;
    for (image, image_spec) in &spec.images {
        let mut tags = Vec::new();
        for tag in &image_spec.tags {
            let reference = tag_reference(image, &tag.tag);
            let done_at = stores.available_at(node, &reference, now);
            let (started, _) = stores.pull_of(node, &reference).unwrap_or((now, done_at));
            status.desired += 1;
            let done = done_at <= now;
            if done {
                status.succeeded += 1;
            } else {
                status.pulling += 1;
                next = Some(next.map_or(done_at, |n| n.min(done_at)));
            }
            tags.push(ImageTagStatus {
                tag: tag.tag.clone(),
                phase: if done {
                    ImagePullPhase::Succeeded
                } else {
                    ImagePullPhase::Pulling
                },
                progress: if done { 100 } else { 0 },
                start_time: time(started),
                completion_time: if done { time(done_at) } else { None },
                version: tag.version,
                image_id: if done {
                    image_id(&reference)
                } else {
                    String::new()
                },
                message: String::new(),
            });
        }
        if !tags.is_empty() {
            status
                .image_statuses
                .insert(image.clone(), ImageStatus { tags });
        }
    }
    (status, next)
}

/// The status merge patch that makes `stored` equal `new`: images `stored` lists and
/// `new` does not are set to null (a merge patch keeps absent keys).
pub fn status_patch(
    stored: Option<&NodeImageStatus>,
    new: &NodeImageStatus,
) -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(new)?;
    if let Some(obj) = value.as_object_mut() {
        let gone: BTreeMap<String, serde_json::Value> = stored
            .map(|s| {
                s.image_statuses
                    .keys()
                    .filter(|k| !new.image_statuses.contains_key(*k))
                    .map(|k| (k.clone(), serde_json::Value::Null))
                    .collect()
            })
            .unwrap_or_default();
        let statuses = obj
            .entry("imageStatuses")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(m) = statuses.as_object_mut() {
            m.extend(gone);
        }
        for key in ["succeeded", "failed", "pulling", "waiting"] {
            obj.entry(key).or_insert(serde_json::json!(0));
        }
    }
    Ok(serde_json::json!({ "status": value }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use inplace_proto::nodeimage::{ImageSpec, ImageTagSpec};

    use super::*;

    fn spec(tags: &[(&str, i64)]) -> NodeImageSpec {
        NodeImageSpec {
            images: BTreeMap::from([(
                "reg/app".to_owned(),
                ImageSpec {
                    tags: tags
                        .iter()
                        .map(|(t, v)| ImageTagSpec {
                            tag: (*t).to_owned(),
                            version: *v,
                            ..ImageTagSpec::default()
                        })
                        .collect(),
                    ..ImageSpec::default()
                },
            )]),
        }
    }

    #[test]
    fn a_pull_takes_the_delay_once_per_node_and_image() {
        let mut s = ImageStores::new(3_000);
        // (what, node, image, now, available at)
        let cases = [
            ("first pull", "n1", "r/a:v2", 1_000, 4_000),
            ("the same pull under way", "n1", "r/a:v2", 2_000, 4_000),
            ("there already", "n1", "r/a:v2", 9_000, 4_000),
            (
                "another node pulls on its own",
                "n2",
                "r/a:v2",
                2_000,
                5_000,
            ),
            ("another image too", "n1", "r/a:v3", 2_000, 5_000),
        ];
        for (what, node, image, now, want) in cases {
            assert_eq!(s.available_at(node, image, now), want, "{what}");
        }
        assert_eq!(s.pulls, 3);
        assert_eq!(s.pull_of("n1", "r/a:v2"), Some((1_000, 4_000)));
        assert_eq!(s.pull_of("n3", "r/a:v2"), None);
        assert_eq!(ImageStores::new(0).available_at("n", "i", 7), 7);
    }

    #[test]
    fn tag_references() {
        assert_eq!(tag_reference("r/a", "v1"), "r/a:v1");
        assert_eq!(tag_reference("r/a:v1", "sha256:ab"), "r/a:v1@sha256:ab");
    }

    #[test]
    fn nodeimage_reports_pulling_then_succeeded_for_the_spec_version() {
        let mut s = ImageStores::new(2_000);
        let sp = spec(&[("v2", 3)]);
        let (st, next) = nodeimage_status(&mut s, "n1", &sp, 10_000);
        let tag = &st.image_statuses["reg/app"].tags[0];
        assert_eq!(tag.phase, ImagePullPhase::Pulling);
        assert_eq!(tag.version, 3);
        assert!(tag.start_time.is_some() && tag.completion_time.is_none());
        assert_eq!((st.desired, st.pulling, st.succeeded), (1, 1, 0));
        assert_eq!(next, Some(12_000));

        let (st, next) = nodeimage_status(&mut s, "n1", &sp, 12_000);
        let tag = &st.image_statuses["reg/app"].tags[0];
        assert_eq!(tag.phase, ImagePullPhase::Succeeded);
        assert_eq!(tag.progress, 100);
        assert_eq!(tag.image_id, image_id("reg/app:v2"));
        assert_eq!((st.desired, st.pulling, st.succeeded), (1, 0, 1));
        assert_eq!(next, None);

        // a new version of a tag the node holds succeeds at once (IfNotPresent)
        let (st, next) = nodeimage_status(&mut s, "n1", &spec(&[("v2", 4)]), 12_500);
        let tag = &st.image_statuses["reg/app"].tags[0];
        assert_eq!((tag.phase, tag.version), (ImagePullPhase::Succeeded, 4));
        assert_eq!(next, None);
        assert_eq!(s.pulls, 1);
    }

    #[test]
    fn the_status_patch_drops_images_that_left_the_spec() {
        let mut s = ImageStores::new(0);
        let (old, _) = nodeimage_status(&mut s, "n1", &spec(&[("v1", 0)]), 0);
        let p = status_patch(Some(&old), &NodeImageStatus::default()).unwrap();
        assert_eq!(
            p["status"]["imageStatuses"]["reg/app"],
            serde_json::Value::Null
        );
        assert_eq!(p["status"]["succeeded"], 0);
        let p = status_patch(None, &old).unwrap();
        assert_eq!(
            p["status"]["imageStatuses"]["reg/app"]["tags"][0]["tag"],
            "v1"
        );
    }
}
