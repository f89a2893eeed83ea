//! Search kernels: lower bound over a sorted sequence in four memory layouts (placeholder,
//! being written).
