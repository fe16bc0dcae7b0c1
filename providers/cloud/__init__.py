"""Cloud machines through apache-libcloud: one base (`base.LibcloudProvider`) and one module per cloud.

Cloud modules import libcloud lazily, so that `import skyhive` does not.
"""
