//! Fabrics (placeholder until the sim fabric lands).
