//! The session core's settings built from the daemon's config: the core
//! (`spec`, `pod`, `machine`) never reads the config file's types, so the
//! engine converts them here, in one place. Each core struct's `Default`
//! is the config's default; the tests below keep the two equal.

use crate::config::{ClusterMode, Config, RoutingLayer, SessionsSection};
use crate::session::gateway::{GatewayParent, Routing};
use crate::session::machine::Timings;
use crate::session::pod::{PodSettings, RUN_AS};
use crate::session::spec::BundleLimits;

impl From<&SessionsSection> for Timings {
    fn from(s: &SessionsSection) -> Self {
        let ms = |secs: u64| secs.saturating_mul(1000);
        Timings {
            start_deadline_ms: ms(s.start_deadline_secs),
            agent_deadline_ms: ms(s.agent_deadline_secs),
            idle_ms: ms(s.idle_secs),
            max_life_ms: ms(s.max_life_secs),
            suspended_ttl_ms: ms(s.suspended_ttl_secs),
            checkpoint_interval_ms: ms(s.checkpoint_interval_secs),
            reloads_per_minute: s.reloads_per_minute,
        }
    }
}

impl From<&SessionsSection> for BundleLimits {
    fn from(s: &SessionsSection) -> Self {
        BundleLimits {
            max_bundle_bytes: s.max_bundle_bytes,
            max_file_bytes: s.max_file_bytes,
            max_files: s.max_files,
        }
    }
}

impl From<&Config> for PodSettings {
    /// `[cluster]`'s pod keys and `[sessions] app_runner`; in sim mode no
    /// uid is named (the sim gives each pod its own host uid).
    fn from(cfg: &Config) -> Self {
        let c = &cfg.cluster;
        PodSettings {
            namespace: c.session_namespace.clone(),
            managed_by: c.managed_by.clone(),
            workspace_image: c.workspace_image.clone(),
            default_app_image: c.default_app_image.clone(),
            default_app_command: c.default_app_command.clone(),
            base_domain: c.base_domain().map(str::to_string),
            routing: match c.routing() {
                RoutingLayer::None => Routing::None,
                RoutingLayer::Ingress => Routing::Ingress,
                RoutingLayer::Gateway => match c.gateway_ref() {
                    Some((namespace, name)) => Routing::Gateway(GatewayParent {
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                        section: c.gateway_section.clone(),
                    }),
                    // Validated at load: gateway routing names its Gateway.
                    None => Routing::None,
                },
            },
            ingress_class: c.ingress_class.clone(),
            ingress_tls_secret: c.ingress_tls_secret.clone(),
            max_cpu: c.max_cpu.clone(),
            max_memory: c.max_memory.clone(),
            max_ephemeral_storage: c.max_ephemeral_storage.clone(),
            app_runner: cfg.sessions.app_runner,
            run_as: (c.mode != ClusterMode::Sim).then_some(RUN_AS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(text: &str) -> Config {
        Config::parse(text, Path::new("/x")).expect("a valid config")
    }

    /// The core's defaults are the config's: a config that sets nothing
    /// converts to them.
    #[test]
    fn the_conversions_of_a_default_config_are_the_cores_defaults() {
        let s = SessionsSection::default();
        assert_eq!(Timings::from(&s), Timings::default());
        assert_eq!(BundleLimits::from(&s), BundleLimits::default());
        let cfg = config("[cluster]\nmode = \"in-cluster\"\n");
        assert_eq!(PodSettings::from(&cfg), PodSettings::default());
        let sim = PodSettings::from(&config("[cluster]\nmode = \"sim\"\n"));
        assert_eq!(
            sim,
            PodSettings {
                run_as: None,
                ..PodSettings::default()
            }
        );
    }

    /// Seconds become milliseconds; every key reaches its field.
    #[test]
    fn every_key_reaches_its_field() {
        let cfg = config(
            "[cluster]\nmode = \"sim\"\nmax_cpu = \"2\"\nmax_memory = \"1Gi\"\n\
             ingress_base_domain = \"d.io\"\n[sessions]\napp_runner = false\n\
             start_deadline_secs = 7\nreloads_per_minute = 3\nmax_files = 9\n",
        );
        let t = Timings::from(&cfg.sessions);
        assert_eq!((t.start_deadline_ms, t.reloads_per_minute), (7_000, 3));
        assert_eq!(BundleLimits::from(&cfg.sessions).max_files, 9);
        let p = PodSettings::from(&cfg);
        assert_eq!((p.max_cpu.as_str(), p.app_runner), ("2", false));
        assert_eq!(p.base_domain.as_deref(), Some("d.io"));
        assert_eq!(p.routing, Routing::Ingress);
        let g = PodSettings::from(&config(
            "[cluster]\nmode = \"sim\"\nbase_domain = \"d.io\"\ngateway = \"infra/gw\"\n\
             gateway_section = \"web\"\n",
        ));
        assert_eq!(
            g.routing,
            Routing::Gateway(GatewayParent {
                namespace: "infra".into(),
                name: "gw".into(),
                section: Some("web".into()),
            })
        );
    }

    /// Outside sim mode, pods name the fixed non-root uid.
    #[test]
    fn outside_sim_mode_pods_name_the_fixed_non_root_uid() {
        let s = PodSettings::from(&config("[cluster]\nmode = \"in-cluster\"\n"));
        assert_eq!(s.run_as, Some(RUN_AS));
    }
}
