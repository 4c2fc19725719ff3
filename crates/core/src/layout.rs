//! Where a resource lists the plugins it enables, their parameters, and
//! its status entries: the one description both sides read.
//!
//! The operator side routes by it (which plugins, in which order; where a
//! validation error points; how the status carries one entry per plugin),
//! and a plugin finds its own entry and parameters by it. CloudNativePG's
//! shape, `spec.plugins[]` and `status.pluginStatus[]`, is [`CnpgLayout`],
//! the default of both; a resource with another shape implements
//! [`PluginLayout`] once and gives it to both.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{
    cluster::{EnabledPlugin, enabled_plugins},
    path::field_path,
    status::{PluginStatusUpdate, previous_statuses, write_plugin_status},
};

/// Where a resource lists the plugins it uses (and their parameters), and
/// how its status carries one entry per plugin.
///
/// Routing works on the resource as JSON; a layout reads that JSON. The
/// default, [`CnpgLayout`], is CloudNativePG's shape; a resource with
/// another shape implements this trait.
///
/// ```
/// use std::collections::BTreeMap;
///
/// use cnpgi_core::{cluster::EnabledPlugin, layout::PluginLayout, status::PluginStatusUpdate};
/// use serde_json::Value;
///
/// /// One plugin, named in `spec.implementation`; entries in `status.plugins`.
/// #[derive(Debug)]
/// struct OnePlugin;
///
/// impl PluginLayout for OnePlugin {
///     fn enabled_plugins(&self, resource: &Value) -> Vec<EnabledPlugin> {
///         let name = resource.pointer("/spec/implementation").and_then(Value::as_str);
///         name.map(|name| EnabledPlugin { index: 0, name: name.to_owned() }).into_iter().collect()
///     }
///     fn field_path(&self, components: &[String], _index: usize) -> String {
///         components.join(".")
///     }
///     fn previous_statuses(&self, _resource: &Value) -> BTreeMap<String, String> {
///         BTreeMap::new()
///     }
///     fn write_plugin_status(&self, resource: &mut Value, entries: &[PluginStatusUpdate]) {
///         let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
///         resource["status"] = serde_json::json!({"plugins": names});
///     }
/// }
///
/// let table = serde_json::json!({"spec": {"implementation": "postgres.example.com"}});
/// assert_eq!(OnePlugin.enabled_plugins(&table)[0].name, "postgres.example.com");
/// assert!(OnePlugin.parameters(&table, &OnePlugin.enabled_plugins(&table)[0]).is_empty());
/// ```
pub trait PluginLayout: std::fmt::Debug + Send + Sync + 'static {
    /// The plugins `resource` enables, in routing order (CNPG-I's rule:
    /// de-duplicated by name, sorted by name), each with its index in the
    /// resource's list (which field paths of its parameters use).
    fn enabled_plugins(&self, resource: &Value) -> Vec<EnabledPlugin>;

    /// The parameters `resource` gives the enabled plugin `plugin` (string
    /// values; others are not parameters). Default: none, for resources
    /// whose spec is the plugins' whole input.
    fn parameters(&self, resource: &Value, plugin: &EnabledPlugin) -> BTreeMap<String, String> {
        let _ = (resource, plugin);
        BTreeMap::new()
    }

    /// Renders a plugin's validation error path (`path_components`) as a
    /// field of the resource; `plugin_index` is the reporting plugin's
    /// [`EnabledPlugin::index`]. Default: CNPG-I's convention
    /// ([`field_path`]: `spec.plugins[<i>].parameters.<name>`).
    fn field_path(&self, path_components: &[String], plugin_index: usize) -> String {
        field_path(path_components, Some(plugin_index))
    }

    /// Each plugin's status as the resource carries it now, by plugin name
    /// (what the plugin answered last time; kept when it answers empty).
    fn previous_statuses(&self, resource: &Value) -> BTreeMap<String, String>;

    /// Replaces the plugin entries in the status of `resource` with `entries`.
    fn write_plugin_status(&self, resource: &mut Value, entries: &[PluginStatusUpdate]);

    /// Whether the resource names one implementation among several: then
    /// the plugin it names is its *preferred* implementation, and a host
    /// routes to another plugin implementing the same kind when the
    /// preferred one is not available (`cnpgi_host::choice`). Default: no,
    /// the named plugin or nothing.
    fn implementation_choice(&self) -> Option<ImplementationChoice> {
        None
    }

    /// The objects of its namespace `resource` references, which a host
    /// fetches and sends to the plugins with it
    /// ([`crate::references`]). Default: none.
    fn references(&self, resource: &Value) -> Vec<crate::references::ObjectReference> {
        let _ = resource;
        Vec::new()
    }
}

/// The metadata `manifest` key (`GetPluginMetadataResponse.manifest`, on the
/// CNPG-I wire already) under which a plugin lists the kinds of
/// implementation it provides, comma-separated, e.g.
/// `cnpgi.io/implements: tables.example.cnpgi.io`.
pub const IMPLEMENTS_MANIFEST_KEY: &str = "cnpgi.io/implements";

/// "One implementation among several" ([`PluginLayout::implementation_choice`]):
/// what the implementations implement, where the resource names its
/// preferred one, and where the host records its choice.
///
/// ```
/// use cnpgi_core::layout::ImplementationChoice;
///
/// let choice = ImplementationChoice::new("tables.example.cnpgi.io", "/spec/implementation");
/// assert_eq!(choice.status_field, "implementationChoice");
/// let table = serde_json::json!({"spec": {"implementation": "postgres.tables.example.cnpgi.io"}});
/// assert_eq!(choice.preferred(&table), Some("postgres.tables.example.cnpgi.io"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImplementationChoice {
    /// What the implementations implement, as plugins list it under
    /// [`IMPLEMENTS_MANIFEST_KEY`] in their metadata manifest.
    pub kind: String,
    /// JSON pointer to the preferred implementation's plugin name in the
    /// resource, e.g. `/spec/implementation`; that plugin must be among
    /// [`PluginLayout::enabled_plugins`].
    pub preferred_pointer: String,
    /// The field of `status` the choice is recorded in. Default
    /// `implementationChoice`.
    pub status_field: String,
}

impl ImplementationChoice {
    /// Implementations of `kind`, the preferred one named at `preferred_pointer`.
    pub fn new(kind: impl Into<String>, preferred_pointer: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            preferred_pointer: preferred_pointer.into(),
            status_field: "implementationChoice".to_owned(),
        }
    }

    /// The preferred implementation `resource` names, if any (not empty).
    pub fn preferred<'a>(&self, resource: &'a Value) -> Option<&'a str> {
        resource
            .pointer(&self.preferred_pointer)
            .and_then(Value::as_str)
            .filter(|name| !name.is_empty())
    }
}

/// Whether a plugin's metadata manifest says it implements `kind`
/// ([`IMPLEMENTS_MANIFEST_KEY`], comma-separated, spaces ignored).
///
/// ```
/// use std::collections::HashMap;
///
/// use cnpgi_core::layout::{IMPLEMENTS_MANIFEST_KEY, implements};
///
/// let manifest = HashMap::from([(IMPLEMENTS_MANIFEST_KEY.to_owned(), "a.example.com, tables.example.com".to_owned())]);
/// assert!(implements(&manifest, "tables.example.com"));
/// assert!(!implements(&manifest, "tables"));
/// assert!(!implements(&HashMap::new(), "tables.example.com"));
/// ```
pub fn implements<S: std::hash::BuildHasher>(
    manifest: &std::collections::HashMap<String, String, S>,
    kind: &str,
) -> bool {
    manifest
        .get(IMPLEMENTS_MANIFEST_KEY)
        .is_some_and(|kinds| kinds.split(',').any(|k| k.trim() == kind))
}

/// Plugin `name`'s entry among `resource`'s enabled plugins, as the plugin
/// itself finds it: listed by name; or, for an implementation of the
/// layout's [`ImplementationChoice::kind`] (`implements`: its metadata
/// manifest says so, see [`implements`]) that the resource does not name,
/// the entry of the preferred implementation it stands in for. The host
/// routes a resource to one implementation, another than the preferred one
/// when that one is not there ([`PluginLayout::implementation_choice`]):
/// the chosen plugin then validates, defaults and reconciles the resource
/// as if it were named.
///
/// ```
/// use std::collections::BTreeMap;
///
/// use cnpgi_core::{cluster::EnabledPlugin, layout::{ImplementationChoice, PluginLayout, enabled_entry}, status::PluginStatusUpdate};
/// use serde_json::Value;
///
/// #[derive(Debug)]
/// struct Tables;
/// impl PluginLayout for Tables {
///     fn enabled_plugins(&self, table: &Value) -> Vec<EnabledPlugin> {
///         let name = table["spec"]["implementation"].as_str().unwrap_or_default().to_owned();
///         vec![EnabledPlugin { index: 0, name }]
///     }
///     fn previous_statuses(&self, _: &Value) -> BTreeMap<String, String> { BTreeMap::new() }
///     fn write_plugin_status(&self, _: &mut Value, _: &[PluginStatusUpdate]) {}
///     fn implementation_choice(&self) -> Option<ImplementationChoice> {
///         Some(ImplementationChoice::new("tables.example.com", "/spec/implementation"))
///     }
/// }
///
/// let table = serde_json::json!({"spec": {"implementation": "mariadb.example.com"}});
/// // The PostgreSQL implementation, chosen in MariaDB's place, stands in for it:
/// let entry = enabled_entry(&Tables, &table, "postgres.example.com", true);
/// assert_eq!(entry.map(|e| e.index), Some(0));
/// // A plugin that does not implement the kind is not enabled.
/// assert!(enabled_entry(&Tables, &table, "naming.example.com", false).is_none());
/// ```
pub fn enabled_entry(
    layout: &dyn PluginLayout,
    resource: &Value,
    name: &str,
    implements: bool,
) -> Option<EnabledPlugin> {
    let enabled = layout.enabled_plugins(resource);
    if let Some(entry) = enabled.iter().find(|plugin| plugin.name == name) {
        return Some(entry.clone());
    }
    if !implements {
        return None;
    }
    let choice = layout.implementation_choice()?;
    let preferred = choice.preferred(resource)?;
    let entry = enabled.into_iter().find(|plugin| plugin.name == preferred)?;
    Some(EnabledPlugin {
        index: entry.index,
        name: name.to_owned(),
    })
}

/// CloudNativePG's layout: plugins in `spec.plugins[]` (`name`, `enabled`
/// defaulting to true, `parameters`), entries in `status.pluginStatus[]`
/// (`name`, `version`, `capabilities`, `operatorCapabilities`, `status`...).
///
/// ```
/// use cnpgi_core::layout::{CnpgLayout, PluginLayout};
///
/// let cluster = serde_json::json!({"spec": {"plugins": [
///     {"name": "b.example.com", "parameters": {"color": "blue", "n": 3}}, {"name": "a.example.com"}]}});
/// let enabled = CnpgLayout.enabled_plugins(&cluster);
/// assert_eq!((enabled[1].index, enabled[1].name.as_str()), (0, "b.example.com"));
/// assert_eq!(CnpgLayout.parameters(&cluster, &enabled[1]), [("color".to_owned(), "blue".to_owned())].into());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct CnpgLayout;

impl PluginLayout for CnpgLayout {
    fn enabled_plugins(&self, resource: &Value) -> Vec<EnabledPlugin> {
        enabled_plugins(resource)
    }

    fn parameters(&self, resource: &Value, plugin: &EnabledPlugin) -> BTreeMap<String, String> {
        let parameters = resource
            .pointer(&format!("/spec/plugins/{}/parameters", plugin.index))
            .and_then(Value::as_object);
        parameters
            .into_iter()
            .flatten()
            .filter_map(|(name, value)| Some((name.clone(), value.as_str()?.to_owned())))
            .collect()
    }

    fn previous_statuses(&self, resource: &Value) -> BTreeMap<String, String> {
        previous_statuses(resource)
            .into_iter()
            .map(|(name, status)| (name.to_owned(), status))
            .collect()
    }

    fn write_plugin_status(&self, resource: &mut Value, entries: &[PluginStatusUpdate]) {
        write_plugin_status(resource, entries);
    }
}
