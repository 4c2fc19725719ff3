//! `#[derive(Parameters)]` for `cnpgi-pluginhelper`: a plugin's parameters
//! (the `spec.plugins[].parameters` map of its entry in a Cluster) as a typed
//! struct.
//!
//! Use it through `cnpgi_pluginhelper::parameters::Parameters`, which
//! documents the attributes and the semantics; this crate only generates the
//! code. Each named field is one parameter:
//!
//! * the key is the field name (`#[params(rename_all = "camelCase")]` on the
//!   struct, `#[param(rename = "key")]` on a field);
//! * the value is parsed with `ParameterValue` (booleans as Go's
//!   `strconv.ParseBool`, integers, floats, strings), or as JSON
//!   (`#[param(json)]`), with `FromStr` (`#[param(from_str)]`) or with a
//!   function (`#[param(with = f)]`, `f: fn(&str) -> Result<T, E: Display>`);
//! * `#[param(default = expr)]` gives the value used when the parameter is
//!   missing (written as the parameter would be, any `ToString`); a field of
//!   type `Option<T>` is optional; any other field without a default is
//!   required;
//! * `#[param(map = f)]` (`fn(T) -> T`) then `#[param(validate = f)]`
//!   (`fn(&T) -> Result<(), E: Display>`) run on every parsed value;
//! * `#[param(immutable)]` (or `immutable = "message"`) refuses a change of
//!   the value once the plugin is configured in a Cluster;
//! * `#[params(deny_unknown)]` refuses parameters that are not declared.
//!
//! The field's doc comment becomes the parameter's description.

#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{Attribute, Data, DeriveInput, Expr, Fields, GenericArgument, LitStr, PathArguments, Type, spanned::Spanned};

/// Derives `cnpgi_pluginhelper::parameters::Parameters` for a struct with
/// named fields. See the crate documentation for the attributes.
#[proc_macro_derive(Parameters, attributes(param, params))]
pub fn derive_parameters(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    expand(&input).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// How parameter keys are made from field names.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Case {
    Snake,
    Camel,
    Kebab,
}

impl Case {
    fn parse(lit: &LitStr) -> syn::Result<Self> {
        match lit.value().as_str() {
            "snake_case" => Ok(Case::Snake),
            "camelCase" => Ok(Case::Camel),
            "kebab-case" => Ok(Case::Kebab),
            other => Err(syn::Error::new(
                lit.span(),
                format!("unknown rename_all {other:?}; expected \"snake_case\", \"camelCase\" or \"kebab-case\""),
            )),
        }
    }

    fn apply(self, field: &str) -> String {
        match self {
            Case::Snake => field.to_owned(),
            Case::Kebab => field.replace('_', "-"),
            Case::Camel => {
                let mut out = String::with_capacity(field.len());
                let mut upper = false;
                for c in field.chars() {
                    if c == '_' {
                        upper = !out.is_empty();
                    } else if upper {
                        out.extend(c.to_uppercase());
                        upper = false;
                    } else {
                        out.push(c);
                    }
                }
                out
            }
        }
    }
}

/// The `#[params(...)]` options of the struct.
struct StructOptions {
    deny_unknown: bool,
    rename_all: Case,
    krate: syn::Path,
}

impl StructOptions {
    fn from_attributes(attrs: &[Attribute]) -> syn::Result<Self> {
        let mut options = StructOptions {
            deny_unknown: false,
            rename_all: Case::Snake,
            krate: syn::parse_quote!(::cnpgi_pluginhelper),
        };
        for attr in attrs.iter().filter(|a| a.path().is_ident("params")) {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("deny_unknown") {
                    options.deny_unknown = true;
                } else if meta.path.is_ident("rename_all") {
                    options.rename_all = Case::parse(&meta.value()?.parse()?)?;
                } else if meta.path.is_ident("crate") {
                    options.krate = meta.value()?.parse::<LitStr>()?.parse()?;
                } else {
                    return Err(meta.error("unknown `params` option; expected deny_unknown, rename_all or crate"));
                }
                Ok(())
            })?;
        }
        Ok(options)
    }
}

/// How a field's value is read from its string.
enum Parser {
    Value,
    Json,
    FromStr,
    With(Expr),
}

/// One field, with its `#[param(...)]` options.
struct Field {
    ident: syn::Ident,
    key: String,
    /// The type of a value: the field's type, or `T` of an `Option<T>` field.
    value_type: Type,
    optional: bool,
    default: Option<Expr>,
    parser: Parser,
    map: Option<Expr>,
    validate: Option<Expr>,
    immutable: Option<String>,
    description: String,
}

/// `T` when `ty` is written `Option<T>` (or a path ending in `Option<T>`).
fn option_inner(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    if path.qself.is_some() {
        return None;
    }
    let last = path.path.segments.last()?;
    if last.ident != "Option" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.iter().collect::<Vec<_>>().as_slice() {
        [GenericArgument::Type(inner)] => Some(inner),
        _ => None,
    }
}

/// The doc comment, as one line.
fn description(attrs: &[Attribute]) -> String {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s), ..
                }) => Some(s.value().trim().to_owned()),
                _ => None,
            },
            _ => None,
        })
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

impl Field {
    fn parse(field: &syn::Field, case: Case) -> syn::Result<Self> {
        let ident = field
            .ident
            .clone()
            .ok_or_else(|| syn::Error::new(field.span(), "Parameters needs named fields"))?;
        let name = ident.to_string();
        let name = name.strip_prefix("r#").unwrap_or(&name);
        let (value_type, optional) = match option_inner(&field.ty) {
            Some(inner) => (inner.clone(), true),
            None => (field.ty.clone(), false),
        };
        let mut out = Field {
            key: case.apply(name),
            ident,
            value_type,
            optional,
            default: None,
            parser: Parser::Value,
            map: None,
            validate: None,
            immutable: None,
            description: description(&field.attrs),
        };
        let mut parsers = 0;
        for attr in field.attrs.iter().filter(|a| a.path().is_ident("param")) {
            attr.parse_nested_meta(|meta| {
                let path = &meta.path;
                if path.is_ident("rename") {
                    out.key = meta.value()?.parse::<LitStr>()?.value();
                } else if path.is_ident("default") {
                    out.default = Some(meta.value()?.parse()?);
                } else if path.is_ident("json") {
                    out.parser = Parser::Json;
                    parsers += 1;
                } else if path.is_ident("from_str") {
                    out.parser = Parser::FromStr;
                    parsers += 1;
                } else if path.is_ident("with") {
                    out.parser = Parser::With(meta.value()?.parse()?);
                    parsers += 1;
                } else if path.is_ident("map") {
                    out.map = Some(meta.value()?.parse()?);
                } else if path.is_ident("validate") {
                    out.validate = Some(meta.value()?.parse()?);
                } else if path.is_ident("immutable") {
                    out.immutable = Some(if meta.input.peek(syn::Token![=]) {
                        meta.value()?.parse::<LitStr>()?.value()
                    } else {
                        "cannot be changed".to_owned()
                    });
                } else {
                    return Err(meta.error(
                        "unknown `param` option; expected rename, default, json, from_str, with, map, validate or immutable",
                    ));
                }
                Ok(())
            })?;
        }
        if parsers > 1 {
            return Err(syn::Error::new(
                field.span(),
                "at most one of `json`, `from_str` and `with` per parameter",
            ));
        }
        if out.optional && out.default.is_some() {
            return Err(syn::Error::new(
                field.ty.span(),
                "an `Option` parameter cannot have a default: use the inner type, which the default always sets",
            ));
        }
        if out.key.is_empty() {
            return Err(syn::Error::new(field.span(), "a parameter name cannot be empty"));
        }
        Ok(out)
    }

    /// A closure `|&str| -> Result<T, String>`: parse, then map, then validate.
    fn parse_closure(&self, parameters: &Tokens) -> Tokens {
        let ty = &self.value_type;
        let parse = match &self.parser {
            Parser::Value => quote!(<#ty as #parameters::ParameterValue>::parse_parameter(__raw)?),
            Parser::Json => quote!(#parameters::from_json::<#ty>(__raw)?),
            Parser::FromStr => quote!(#parameters::from_str_value::<#ty>(__raw)?),
            Parser::With(f) => quote!((#f)(__raw).map_err(|e| ::std::string::ToString::to_string(&e))?),
        };
        let map = self.map.as_ref().map(|f| quote!(let __value: #ty = (#f)(__value);));
        let validate = self
            .validate
            .as_ref()
            .map(|f| quote!((#f)(&__value).map_err(|e| ::std::string::ToString::to_string(&e))?;));
        quote! {
            |__raw: &str| -> ::std::result::Result<#ty, ::std::string::String> {
                let __value: #ty = #parse;
                #map
                #validate
                ::std::result::Result::Ok(__value)
            }
        }
    }

    /// `Option<String>`: the default as the parameter would be written.
    fn default_string(&self) -> Tokens {
        match &self.default {
            Some(expr) => quote!(::std::option::Option::Some(::std::string::ToString::to_string(&(#expr)))),
            None => quote!(::std::option::Option::<::std::string::String>::None),
        }
    }
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let options = StructOptions::from_attributes(&input.attrs)?;
    let fields = struct_fields(input, &options)?;
    let krate = &options.krate;
    let parameters = quote!(#krate::parameters);
    let name = &input.ident;
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
    let declared = declared_fn(&fields, &parameters);
    let parse = parse_fn(&fields, &options, &parameters);
    let check_change = check_change_fn(&fields, &options, &parameters);
    let validates = options.deny_unknown.then(|| {
        quote!(
            fn validates() -> bool {
                true
            }
        )
    });
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #parameters::Parameters for #name #type_generics #where_clause {
            #declared
            #parse
            #check_change
            #validates
        }
    })
}

/// The parameters the struct's named fields declare, each key once.
fn struct_fields(input: &DeriveInput, options: &StructOptions) -> syn::Result<Vec<Field>> {
    let not_named = || {
        syn::Error::new(
            input.span(),
            "Parameters can only be derived for a struct with named fields",
        )
    };
    let Data::Struct(data) = &input.data else {
        return Err(not_named());
    };
    let fields: Vec<Field> = match &data.fields {
        Fields::Named(named) => named
            .named
            .iter()
            .map(|f| Field::parse(f, options.rename_all))
            .collect::<syn::Result<_>>()?,
        Fields::Unit => Vec::new(),
        Fields::Unnamed(_) => return Err(not_named()),
    };
    for (i, field) in fields.iter().enumerate() {
        if let Some(other) = fields[..i].iter().find(|f| f.key == field.key) {
            return Err(syn::Error::new(
                field.ident.span(),
                format!(
                    "parameter {:?} is declared twice (also by `{}`)",
                    field.key, other.ident
                ),
            ));
        }
    }
    Ok(fields)
}

/// `Parameters::declared`: one `ParameterInfo` per field.
fn declared_fn(fields: &[Field], parameters: &Tokens) -> Tokens {
    let infos = fields.iter().map(|f| {
        let key = &f.key;
        let description = &f.description;
        let default = f.default_string();
        let required = !f.optional && f.default.is_none();
        let immutable = f.immutable.is_some();
        quote! {
            #parameters::ParameterInfo {
                name: #key,
                description: #description,
                default: #default,
                required: #required,
                immutable: #immutable,
            }
        }
    });
    quote! {
        fn declared() -> ::std::vec::Vec<#parameters::ParameterInfo> {
            ::std::vec![#(#infos),*]
        }
    }
}

/// `Parameters::parse`: every field read (every error collected), then the
/// struct built when all were read.
fn parse_fn(fields: &[Field], options: &StructOptions, parameters: &Tokens) -> Tokens {
    let krate = &options.krate;
    let locals: Vec<_> = (0..fields.len()).map(|i| format_ident!("__field{}", i)).collect();
    let reads = fields.iter().zip(&locals).map(|(f, local)| {
        let key = &f.key;
        let default = f.default_string();
        let closure = f.parse_closure(parameters);
        let read = if f.optional { quote!(optional) } else { quote!(required) };
        quote! {
            let #local = __reader.#read(#key, (#default).as_deref(), #closure);
        }
    });
    let idents = fields.iter().map(|f| &f.ident);
    let deny_unknown = options.deny_unknown.then(|| {
        let keys = fields.iter().map(|f| &f.key);
        quote!(__reader.deny_unknown(&[#(#keys),*]);)
    });
    quote! {
        fn parse(
            __index: usize,
            __params: &::std::collections::BTreeMap<::std::string::String, ::std::string::String>,
        ) -> ::std::result::Result<Self, ::std::vec::Vec<#krate::validation::ValidationError>> {
            let mut __reader = #parameters::Reader::new(__index, __params);
            #(#reads)*
            #deny_unknown
            let __errors = __reader.finish();
            match (#(#locals,)*) {
                (#(::std::option::Option::Some(#locals),)*) if __errors.is_empty() => {
                    ::std::result::Result::Ok(Self { #(#idents: #locals),* })
                }
                _ => ::std::result::Result::Err(__errors),
            }
        }
    }
}

/// `Parameters::check_change`: an error for each `immutable` field changed.
fn check_change_fn(fields: &[Field], options: &StructOptions, parameters: &Tokens) -> Tokens {
    let krate = &options.krate;
    let immutables = fields.iter().filter_map(|f| {
        let message = f.immutable.as_ref()?;
        let key = &f.key;
        let default = f.default_string();
        let closure = f.parse_closure(parameters);
        Some(quote! {
            #parameters::Reader::immutable(
                &mut __errors, __index, __old, __new, #key, (#default).as_deref(), #closure, #message,
            );
        })
    });
    quote! {
        fn check_change(
            __index: usize,
            __old: &::std::collections::BTreeMap<::std::string::String, ::std::string::String>,
            __new: &::std::collections::BTreeMap<::std::string::String, ::std::string::String>,
        ) -> ::std::vec::Vec<#krate::validation::ValidationError> {
            #[allow(unused_mut)]
            let mut __errors = ::std::vec::Vec::new();
            #(#immutables)*
            __errors
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(input: Tokens) -> String {
        let input: DeriveInput = syn::parse2(input).expect("valid Rust");
        match expand(&input) {
            Ok(_) => String::new(),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn cases() {
        assert_eq!(Case::Camel.apply("barman_object_name"), "barmanObjectName");
        assert_eq!(Case::Camel.apply("labels"), "labels");
        assert_eq!(Case::Kebab.apply("max_parallel"), "max-parallel");
        assert_eq!(Case::Snake.apply("max_parallel"), "max_parallel");
    }

    #[test]
    fn mistakes_are_compile_errors_that_say_what_is_wrong() {
        assert!(
            error_of(quote!(
                enum E {
                    A,
                }
            ))
            .contains("struct with named fields")
        );
        assert!(
            error_of(quote!(
                struct S(u8);
            ))
            .contains("struct with named fields")
        );
        assert!(
            error_of(quote!(
                struct S {
                    #[param(nope)]
                    a: u8,
                }
            ))
            .contains("unknown `param` option")
        );
        assert!(
            error_of(quote!(
                #[params(nope)]
                struct S {
                    a: u8,
                }
            ))
            .contains("unknown `params` option")
        );
        assert!(
            error_of(quote!(
                #[params(rename_all = "UPPER")]
                struct S {
                    a: u8,
                }
            ))
            .contains("unknown rename_all")
        );
        assert!(
            error_of(quote!(
                struct S {
                    #[param(json, from_str)]
                    a: u8,
                }
            ))
            .contains("at most one of")
        );
        assert!(
            error_of(quote!(
                struct S {
                    #[param(default = 1)]
                    a: Option<u8>,
                }
            ))
            .contains("cannot have a default")
        );
        assert!(
            error_of(quote!(
                struct S {
                    a: u8,
                    #[param(rename = "a")]
                    b: u8,
                }
            ))
            .contains("declared twice")
        );
        assert!(
            error_of(quote!(
                struct S {
                    #[param(rename = "")]
                    a: u8,
                }
            ))
            .contains("cannot be empty")
        );
        assert_eq!(
            error_of(quote!(
                struct S {}
            )),
            ""
        );
        assert_eq!(
            error_of(quote!(
                struct S;
            )),
            ""
        );
    }

    #[test]
    fn fields_read_their_options() {
        let input: syn::FieldsNamed = syn::parse2(quote!({
            /// First line.
            ///
            /// Second line.
            #[param(rename = "x", default = 3, validate = check, map = norm, immutable = "no")]
            a_b: u8,
            c_d: Option<String>,
            #[param(immutable)]
            e: bool,
        }))
        .unwrap();
        let fields: Vec<Field> = input
            .named
            .iter()
            .map(|f| Field::parse(f, Case::Camel).unwrap())
            .collect();
        assert_eq!(fields[0].key, "x");
        assert_eq!(fields[0].description, "First line. Second line.");
        assert!(fields[0].default.is_some() && fields[0].validate.is_some() && fields[0].map.is_some());
        assert_eq!(fields[0].immutable.as_deref(), Some("no"));
        assert_eq!(fields[1].key, "cD");
        assert!(fields[1].optional);
        assert_eq!(fields[2].immutable.as_deref(), Some("cannot be changed"));
    }
}
