//! Factory, EP, provider options, capability and the kernel registry.
