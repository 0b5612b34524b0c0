//! Whether a request path can match one of the configured route templates,
//! decided before the router runs: a path no template can match is passed
//! through at once. The check only ever errs towards "may match" (the router
//! then decides and falls back to the pass-through itself), so a configured
//! route is never skipped.

/// One segment of a template (config.rs checked the syntax).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    /// `{name}`: any one segment.
    Parameter,
    /// `{*name}`, last: this segment and everything after it.
    Rest,
}

/// The configured path templates.
#[derive(Debug, Default)]
pub(crate) struct Templates {
    templates: Vec<Vec<Segment>>,
}

impl Templates {
    pub(crate) fn new<'a>(paths: impl IntoIterator<Item = &'a str>) -> Templates {
        let mut templates: Vec<Vec<Segment>> = paths
            .into_iter()
            .map(|path| {
                path.trim_start_matches('/')
                    .split('/')
                    .map(|segment| {
                        if segment.starts_with("{*") {
                            Segment::Rest
                        } else if segment.starts_with('{') {
                            Segment::Parameter
                        } else {
                            Segment::Literal(segment.to_owned())
                        }
                    })
                    .collect()
            })
            .collect();
        templates.dedup();
        Templates { templates }
    }

    /// False only when no template can match `path` (the raw, still
    /// percent-encoded path, as the router compares it).
    pub(crate) fn may_match(&self, path: &str) -> bool {
        self.templates.iter().any(|template| {
            let mut segments = path.trim_start_matches('/').split('/');
            for expected in template {
                match (expected, segments.next()) {
                    (Segment::Rest, _) => return true,
                    (_, None) => return false,
                    (Segment::Parameter, Some(_)) => {}
                    (Segment::Literal(literal), Some(segment)) => {
                        if literal != segment {
                            return false;
                        }
                    }
                }
            }
            segments.next().is_none()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Templates;

    #[test]
    fn a_path_no_template_can_match_is_told_apart() {
        let templates = Templates::new([
            "/accounts/{account}/withdraw",
            "/files/{*rest}",
            "/ping/exact",
        ]);
        for may in [
            "/accounts/A/withdraw",
            "/accounts/%41/withdraw",
            "/accounts//withdraw",
            "/files/a",
            "/files/a/b/c",
            "/files/",
            // The router may refuse these; the check only has to never
            // refuse what the router accepts.
            "/files",
            "/ping/exact",
        ] {
            assert!(templates.may_match(may), "{may}");
        }
        for never in [
            "/",
            "/ping",
            "/accounts/A",
            "/accounts/A/withdraw/more",
            "/accounts/A/deposit",
            "/Accounts/A/withdraw",
            "/file/a",
            "/ping/exact/",
        ] {
            assert!(!templates.may_match(never), "{never}");
        }
    }

    #[test]
    fn no_templates_match_nothing() {
        assert!(!Templates::new([]).may_match("/anything"));
    }
}
