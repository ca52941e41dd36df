//! The pure narrowing core: intersects what a server offers, what tenant policies permit and what an
//! AgentSpec asks for. No I/O. (Filled in by the grants issue.)
