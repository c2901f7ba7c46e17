"""Names bound to other names: a class and a literal, reached through an alias."""


class Klass:
    pass


alias_of_class = Klass
number = 3
alias_of_number: int = number
