"""The local servers the tests run in place of hosted services these machines cannot reach (model APIs,
Agent Engine, A2A agents): each speaks the real protocol, driven through the real client library."""
