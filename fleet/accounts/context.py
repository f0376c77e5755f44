from fleet.accounts.access import Role, role_of


def role(request):
    user_role = role_of(getattr(request, "user", None))
    return {
        "user_role": user_role.name.lower(),
        "can_operate": user_role >= Role.OPERATOR,
        "can_administer": user_role >= Role.ADMIN,
    }
