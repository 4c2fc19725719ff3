//! TODO(helper)
