//! Kubernetes resource quantities (`"500m"`, `"1.5Gi"`, `"2e3"`), as far as the planner
//! compares them: in-place resize eligibility (QoS class) and resize completion.
//!
//! The implementation is the one the daemon shares: [`inplace_proto::quantity`].

pub use inplace_proto::quantity::{cmp, equal, is_positive, millis};

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::cmp::Ordering;

    #[test]
    fn decimal_binary_and_exponent_suffixes_scale_to_millis() {
        let cases = [
            ("1", Some(1000)),
            ("500m", Some(500)),
            ("0.5", Some(500)),
            (".5", Some(500)),
            ("1.5k", Some(1_500_000)),
            ("1Ki", Some(1_024_000)),
            ("1Gi", Some(1_073_741_824_000)),
            ("2e3", Some(2_000_000)),
            ("1E-3", Some(1)),
            ("1n", Some(1)), // rounded up like MilliValue
            ("-250m", Some(-250)),
            ("+2", Some(2000)),
            ("", None),
            ("abc", None),
            ("1Xi", None),
            ("1.2.3", None),
        ];
        for (text, want) in cases {
            assert_eq!(millis(text), want, "{text}");
        }
    }

    #[test]
    fn equal_quantities_in_different_notations_compare_equal() {
        let q = |s: &str| Quantity(s.to_owned());
        assert!(equal(&q("1"), &q("1000m")));
        assert!(equal(&q("1Gi"), &q("1024Mi")));
        assert!(!equal(&q("1G"), &q("1Gi")));
        assert!(!equal(&q("bogus"), &q("1")));
        assert!(is_positive(&q("1m")));
        assert!(!is_positive(&q("0")));
        assert_eq!(cmp(&q("2"), &q("1500m")), Ordering::Greater);
    }
}
