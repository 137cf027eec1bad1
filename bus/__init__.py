"""The message bus: NATS connection, subjects, codec, Service base class, embedded server, recorder."""
